package docs

// The names check: every code span of the pages in namedPages that reads as
// a repository path or a Go name must resolve against the tree, so that a
// file moved or an identifier renamed away fails this test, naming each
// span that went stale (page:line), rather than leaving the page to lie.
//
// Which spans are checked, and against what:
//
//   - A path is a span of path characters that holds a '/' or ends in one
//     of pathExtensions. It is relative to the repository's root, and also
//     resolves where some directory of the tree holds it (`sync.go`,
//     `stages/nodes.yaml`, written beside the directory they are in). Braces
//     expand as in layout.md ({a,b}), '*' globs, and a <placeholder> stands
//     for any one name. Not paths: spans with a space (commands such as
//     `make test`), flags (-x), variables ($X, X=y), absolute or home paths
//     (/etc/..., ~/.kube), URLs and host:port, module and domain paths
//     (whose first element holds a '.': sigs.k8s.io/kueue,
//     kwok.indexedjob.dev/*), API group versions whose group is no
//     top-level directory (batch/v1, not api/v1alpha1), and what the
//     build writes under buildOutputs (bin/, dist/), which a fresh clone
//     does not hold, or under a directory the reader picks (<dir>/out).
//     A trailing /... (a package pattern) names its directory.
//   - A Go name is a span of Go identifiers joined by '.', with at most one
//     call suffix ("(...)") at its end. A single identifier is checked only
//     when it has an upper-case letter after its first (syncState,
//     StartComponent), so plain words, ALL_CAPS variables and enum values
//     such as `Failed` are left alone; it resolves when the tree declares it
//     (package-level, a method, a field) or uses it as a word of a string
//     literal or struct tag (Kubernetes API fields such as restartPolicy,
//     event reasons, kinds) or as the name picked from an imported package
//     (corev1.LimitRange). A selector a.b.c resolves step by step from a
//     package of the tree (by name or by the alias an import gives it; b a
//     top-level name or a member of one of its types, as
//     controlplane.StartComponent), a
//     type of the tree (by name, in any package), or an outside package the
//     tree imports, whose a.b the tree itself must use (workqueue.ParallelizeUntil).
//     A selector whose first element is none of these is an API or YAML
//     path (spec.indexes) and is not checked, unless that element has an
//     upper-case letter and is nowhere in the tree. The few names of the
//     outside world that look like Go and appear nowhere in the tree are in
//     outsideNames.
//
// A check that fails names the page, the line, the span and the step that
// found nothing ("Reconciler declares no gangs"), so that after a rename a
// reader greps for the new name and fixes each line in turn.
//
// The Go files read are every .go file of the tree but those goDirs skips
// (build output, testdata, vendor), of every module in it, parsed without
// type checking.

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/google/go-cmp/cmp"
)

// namedPages are the pages whose code spans must resolve against the tree.
var namedPages = []string{"DEVELOPERS.md", layoutPage}

// modulePath is the main module's path, which an import of one of the
// tree's own packages starts with.
const modulePath = "github.com/indexed-batch-job/indexed-batch-job"

// pathExtensions are the endings that make a span without a '/' a file
// name of the tree.
var pathExtensions = []string{".go", ".md", ".yaml", ".yml", ".sh", ".json", ".mod", ".tpl", ".svg", ".png"}

// buildOutputs are the top-level directories the build writes and the tree
// does not hold: a path under them names a build product, not checked.
var buildOutputs = []string{"bin", "dist"}

// outsideNames are the names the pages borrow from outside the tree that
// look like Go and that no Go file of the tree declares, uses or spells
// out: kept short, each a name of the outside world, never one of ours.
var outsideNames = map[string]bool{
	"RuntimeConfig":             true, // the CRI call containerd 1.6 does not answer
	"cleanupOrphanedPodCgroups": true, // the kubelet's
	"JobReconciler":             true, // Kueue's
	"matchConditions":           true, // the webhook configurations' field, set by a marker's patch
}

var (
	// goName is a span that reads as a Go name: identifiers joined by '.',
	// with at most one call suffix.
	goName = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)(?:\([^()]*\))?$`)
	// pathChars are the characters a path span may hold.
	pathChars = regexp.MustCompile(`^[A-Za-z0-9_.\-/{},*<>+]+$`)
	// apiGroupVersion is a Kubernetes API group and version, batch/v1.
	apiGroupVersion = regexp.MustCompile(`^[a-z.]+/v[0-9]+(?:(?:alpha|beta)[0-9]+)?$`)
	placeholder     = regexp.MustCompile(`<[^<>/]*>`)
	majorVersion    = regexp.MustCompile(`^v[0-9]+$`)
	wordOf          = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`)
)

// docSpan is one code span of a page and the line it starts on.
type docSpan struct {
	text string
	line int
}

// codeSpans gives the code spans of a markdown page outside its fenced
// blocks. A span may run over a line break, which reads as a space, but
// not over a blank line.
func codeSpans(text string) []docSpan {
	lines := strings.Split(text, "\n")
	fence := ""
	for i, l := range lines {
		trimmed := strings.TrimSpace(l)
		switch {
		case fence != "":
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			lines[i] = ""
		case strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~"):
			fence = trimmed[:3]
			lines[i] = ""
		}
	}
	text = strings.Join(lines, "\n")
	var spans []docSpan
	for i := 0; i < len(text); {
		if text[i] != '`' {
			i++
			continue
		}
		n := 0
		for i+n < len(text) && text[i+n] == '`' {
			n++
		}
		start := i + n
		end := -1
		for j := start; j < len(text); {
			if text[j] != '`' {
				if strings.HasPrefix(text[j:], "\n\n") {
					break
				}
				j++
				continue
			}
			m := 0
			for j+m < len(text) && text[j+m] == '`' {
				m++
			}
			if m == n {
				end = j
				break
			}
			j += m
		}
		if end < 0 {
			i = start // a lone run of backticks is text
			continue
		}
		body := strings.Join(strings.Fields(text[start:end]), " ")
		spans = append(spans, docSpan{text: body, line: strings.Count(text[:i], "\n") + 1})
		i = end + n
	}
	return spans
}

// goType is what a type of the tree declares: its members (fields,
// methods, interface methods) with the type name of each field where it
// has one, and the types it embeds.
type goType struct {
	members  map[string]string
	embedded []string
}

// goPkg is what one package of the tree declares at its top level.
type goPkg struct {
	dir   string
	name  string
	decls map[string]bool
	types map[string]*goType
}

func (p *goPkg) typ(name string) *goType {
	t := p.types[name]
	if t == nil {
		t = &goType{members: map[string]string{}}
		p.types[name] = t
	}
	return t
}

// hasMember reports whether a type of the package declares name: a
// method such as controlplane.StartComponent, named by its package.
func (p *goPkg) hasMember(name string) bool {
	for _, t := range p.types {
		if _, ok := t.members[name]; ok {
			return true
		}
	}
	return false
}

// goIndex is what the Go files of a tree declare and use.
type goIndex struct {
	// pkgs are the tree's packages by name and by every alias an import
	// gives them.
	pkgs map[string][]*goPkg
	// types are the tree's types by name, from every package.
	types map[string][]*goType
	// declared is every name the tree declares: package-level names,
	// members, fields, package names.
	declared map[string]bool
	// members is every member name of every type of the tree.
	members map[string]bool
	// words are the identifier-like words of every string literal and
	// struct tag of the tree.
	words map[string]bool
	// external are the outside packages the tree imports, by the name the
	// importing files give them, and the names the tree picks from each.
	external map[string]map[string]bool
	// picked is every name the tree picks from an outside package.
	picked map[string]bool
}

// typeName is the name of the named type an expression of a field's type
// refers to (through pointers, slices and type arguments), "" if none.
func typeName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.StarExpr:
		return typeName(e.X)
	case *ast.ArrayType:
		return typeName(e.Elt)
	case *ast.SelectorExpr:
		return e.Sel.Name
	case *ast.IndexExpr:
		return typeName(e.X)
	case *ast.IndexListExpr:
		return typeName(e.X)
	}
	return ""
}

// importName is the name a file uses for an import: its alias, else the
// last element of its path that is not a major version.
func importName(spec *ast.ImportSpec) (string, string) {
	p, _ := strconv.Unquote(spec.Path.Value)
	if spec.Name != nil {
		return spec.Name.Name, p
	}
	elems := strings.Split(p, "/")
	name := elems[len(elems)-1]
	if len(elems) > 1 && majorVersion.MatchString(name) && strings.Contains(p, ".") && !strings.HasPrefix(p, "k8s.io/api/") {
		name = elems[len(elems)-2]
	}
	return strings.TrimPrefix(name, "go-"), p
}

// newGoIndex parses every Go file under root that goDirs would count.
func newGoIndex(root string) (*goIndex, error) {
	x := &goIndex{pkgs: map[string][]*goPkg{}, types: map[string][]*goType{}, declared: map[string]bool{},
		members: map[string]bool{}, words: map[string]bool{}, external: map[string]map[string]bool{}, picked: map[string]bool{}}
	byKey := map[string]*goPkg{}     // dir and package name
	aliases := map[string][]string{} // alias of a tree package -> its dirs
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(file string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, file)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if skipped(rel, d.Name()) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(file, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		dir := path.Dir(rel)
		key := dir + " " + f.Name.Name
		pkg := byKey[key]
		if pkg == nil {
			pkg = &goPkg{dir: dir, name: f.Name.Name, decls: map[string]bool{}, types: map[string]*goType{}}
			byKey[key] = pkg
			x.pkgs[f.Name.Name] = append(x.pkgs[f.Name.Name], pkg)
			x.declared[f.Name.Name] = true
		}
		x.readFile(f, pkg, aliases)
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, pkg := range byKey {
		for name, t := range pkg.types {
			x.types[name] = append(x.types[name], t)
		}
	}
	for alias, dirs := range aliases {
		for _, dir := range dirs {
			for _, pkg := range byKey {
				if pkg.dir == dir && !slices.Contains(x.pkgs[alias], pkg) && !strings.HasSuffix(pkg.name, "_test") {
					x.pkgs[alias] = append(x.pkgs[alias], pkg)
				}
			}
		}
	}
	return x, nil
}

// readFile records what one file declares, the tree packages it imports
// under an alias of their own, the outside names it picks, and the words of
// its strings.
func (x *goIndex) readFile(f *ast.File, pkg *goPkg, aliases map[string][]string) {
	outside := map[string]string{}
	for _, spec := range f.Imports {
		name, p := importName(spec)
		if name == "_" || name == "." {
			continue
		}
		if dir, ok := strings.CutPrefix(p, modulePath+"/"); ok {
			aliases[name] = append(aliases[name], dir)
			continue
		}
		outside[name] = p
		if x.external[name] == nil {
			x.external[name] = map[string]bool{}
		}
	}
	member := func(t *goType, name, fieldType string) {
		t.members[name] = fieldType
		x.members[name] = true
		x.declared[name] = true
	}
	fields := func(t *goType, list *ast.FieldList) {
		if list == nil {
			return
		}
		for _, field := range list.List {
			if len(field.Names) == 0 { // embedded
				name := typeName(field.Type)
				t.embedded = append(t.embedded, name)
				member(t, name, name)
				continue
			}
			for _, n := range field.Names {
				member(t, n.Name, typeName(field.Type))
			}
		}
	}
	for _, decl := range f.Decls {
		switch decl := decl.(type) {
		case *ast.FuncDecl:
			if decl.Recv == nil || len(decl.Recv.List) == 0 {
				pkg.decls[decl.Name.Name] = true
				x.declared[decl.Name.Name] = true
				continue
			}
			member(pkg.typ(typeName(decl.Recv.List[0].Type)), decl.Name.Name, "")
		case *ast.GenDecl:
			for _, spec := range decl.Specs {
				switch spec := spec.(type) {
				case *ast.TypeSpec:
					pkg.decls[spec.Name.Name] = true
					x.declared[spec.Name.Name] = true
					t := pkg.typ(spec.Name.Name)
					switch st := spec.Type.(type) {
					case *ast.StructType:
						fields(t, st.Fields)
					case *ast.InterfaceType:
						fields(t, st.Methods)
					}
				case *ast.ValueSpec:
					for _, n := range spec.Names {
						pkg.decls[n.Name] = true
						x.declared[n.Name] = true
					}
				}
			}
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.SelectorExpr:
			if id, ok := n.X.(*ast.Ident); ok {
				if _, ok := outside[id.Name]; ok {
					x.external[id.Name][n.Sel.Name] = true
					x.picked[n.Sel.Name] = true
				}
			}
		case *ast.BasicLit:
			if n.Kind == token.STRING {
				s, err := strconv.Unquote(n.Value)
				if err != nil {
					s = n.Value
				}
				for _, w := range wordOf.FindAllString(s, -1) {
					x.words[w] = true
				}
			}
		}
		return true
	})
}

// member looks name up on every type of the tree called typ, and on what
// they embed; it gives the type name of the member found (possibly "").
func (x *goIndex) member(types []*goType, name string, depth int) (string, bool) {
	for _, t := range types {
		if ft, ok := t.members[name]; ok {
			return ft, true
		}
	}
	if depth == 0 {
		return "", false
	}
	for _, t := range types {
		for _, e := range t.embedded {
			if ft, ok := x.member(x.types[e], name, depth-1); ok {
				return ft, true
			}
		}
	}
	return "", false
}

// chain resolves the rest of a selector from the types given: each element
// a member of the previous one's type, or, once a member's type is not one
// of the tree's, a member of any type of the tree.
func (x *goIndex) chain(types []*goType, rest []string) bool {
	for _, name := range rest {
		if types == nil {
			if !x.members[name] {
				return false
			}
			continue
		}
		ft, ok := x.member(types, name, 3)
		if !ok {
			return false
		}
		types = x.types[ft]
	}
	return true
}

// interiorUpper reports whether an identifier has an upper-case letter
// after its first and a lower-case one: camelCase or PascalCase, not a
// word, not ALL_CAPS.
func interiorUpper(s string) bool {
	lower := strings.IndexFunc(s, unicode.IsLower) >= 0
	return lower && len(s) > 1 && strings.IndexFunc(s[1:], unicode.IsUpper) >= 0
}

// checkName says what is wrong with a span that reads as a Go name, "" if
// it resolves or is not checked.
func (x *goIndex) checkName(name string) string {
	parts := strings.Split(name, ".")
	first := parts[0]
	if len(parts) == 1 {
		if !interiorUpper(first) || strings.Contains(first, "_") {
			return ""
		}
		if x.declared[first] || x.words[first] || x.picked[first] {
			return ""
		}
		return "no Go declaration, string or struct tag of the tree holds it"
	}
	known := false
	for _, pkg := range x.pkgs[first] {
		known = true
		if t, ok := pkg.types[parts[1]]; ok && pkg.decls[parts[1]] {
			if x.chain([]*goType{t}, parts[2:]) {
				return ""
			}
			continue
		}
		if pkg.decls[parts[1]] || pkg.hasMember(parts[1]) {
			if x.chain(nil, parts[2:]) {
				return ""
			}
		}
	}
	if types, ok := x.types[first]; ok {
		known = true
		if x.chain(types, parts[1:]) {
			return ""
		}
	}
	if picked, ok := x.external[first]; ok {
		known = true
		if picked[parts[1]] {
			return ""
		}
	}
	switch {
	case known:
		return fmt.Sprintf("%s declares no %s", strings.Join(parts[:len(parts)-1], "."), parts[len(parts)-1])
	case unicode.IsUpper(rune(first[0])) || interiorUpper(first):
		if x.words[first] {
			return "" // an API or YAML path: retryBackoff.createRefusedDelaySeconds
		}
		return fmt.Sprintf("%s is no package, type or imported package of the tree", first)
	}
	return "" // an API or YAML path: spec.indexes
}

// repoPaths is every file and directory of a tree, relative to its root.
func repoPaths(root string) ([]string, error) {
	var paths []string
	err := filepath.WalkDir(root, func(file string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, file)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() && (d.Name() == ".git" || slices.Contains(buildOutputs, rel)) {
			return filepath.SkipDir
		}
		if rel != "." {
			paths = append(paths, rel)
		}
		return nil
	})
	sort.Strings(paths)
	return paths, err
}

// pathSpan gives the pattern a span that reads as a repository path
// stands for (without its braces expanded), ok false for a span that is
// not one.
func pathSpan(s string) (string, bool) {
	if !pathChars.MatchString(s) || strings.HasPrefix(s, "-") || strings.HasPrefix(s, "/") {
		return "", false
	}
	s = strings.TrimSuffix(strings.TrimPrefix(s, "./"), "/...") // internal/...: a package pattern
	hasSlash := strings.Contains(s, "/")
	ext := false
	for _, e := range pathExtensions {
		ext = ext || strings.HasSuffix(s, e)
	}
	if !hasSlash && !ext {
		return "", false
	}
	first, _, _ := strings.Cut(s, "/")
	switch {
	case hasSlash && strings.Contains(first, ".") && !strings.HasPrefix(first, "."):
		return "", false // a module or domain path: sigs.k8s.io/kueue
	case hasSlash && slices.Contains(buildOutputs, first):
		return "", false // a build product
	case strings.HasPrefix(first, "<"):
		return "", false // under a directory the reader picks: <dir>/webhook-args
	}
	return placeholder.ReplaceAllString(s, "*"), true
}

// checkPath says what is wrong with a path pattern, "" if the tree holds
// it, at its root or under some directory.
func checkPath(paths []string, pattern string) string {
	for _, p := range expand(pattern) {
		p = path.Clean(p)
		found := false
		for _, have := range paths {
			elems := strings.Split(have, "/")
			n := strings.Count(p, "/") + 1
			if n > len(elems) {
				continue
			}
			if ok, _ := path.Match(p, strings.Join(elems[len(elems)-n:], "/")); ok {
				found = true
				break
			}
		}
		if !found {
			return fmt.Sprintf("the tree holds no %s", p)
		}
	}
	return ""
}

// staleNames gives, for each span of the page that reads as a path or a
// Go name and resolves to nothing, "page:line: `span`: why".
func staleNames(root, page string, x *goIndex, paths []string) ([]string, error) {
	data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(page)))
	if err != nil {
		return nil, err
	}
	var stale []string
	for _, s := range codeSpans(string(data)) {
		why := ""
		if pattern, ok := pathSpan(s.text); ok {
			first, _, _ := strings.Cut(s.text, "/")
			if !apiGroupVersion.MatchString(s.text) || slices.Contains(paths, first) {
				why = checkPath(paths, pattern)
			}
		} else if m := goName.FindStringSubmatch(s.text); m != nil && !outsideNames[m[1]] {
			why = x.checkName(m[1])
		}
		if why != "" {
			stale = append(stale, fmt.Sprintf("%s:%d: `%s`: %s", page, s.line, s.text, why))
		}
	}
	return stale, nil
}

// TestNamesInDocsResolve fails, naming each (page:line), for a path or Go
// name in backticks on DEVELOPERS.md or docs/layout.md that the tree does
// not hold: a file moved, an identifier renamed away. Fix the page to name
// what the code holds now (git log -S'name' finds where it went).
func TestNamesInDocsResolve(t *testing.T) {
	x, err := newGoIndex(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	if len(x.pkgs["controller"]) == 0 {
		t.Fatal("found no package controller: is repoRoot the repository's root?")
	}
	paths, err := repoPaths(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	for _, page := range namedPages {
		stale, err := staleNames(repoRoot, page, x, paths)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range stale {
			t.Error(s)
		}
	}
}

// The names check must fail on a name renamed away and a path moved, and
// only on those: a tree written for the test, whose page names what the
// tree declares, what it no longer does, and what is no path or Go name.
func TestStaleNamesAreFound(t *testing.T) {
	dir := t.TempDir()
	for name, text := range map[string]string{
		"internal/widget/widget.go": `package widget

import "k8s.io/client-go/util/workqueue"

// Widget is one.
type Widget struct {
	Size  int
	parts []part
	Spec  WidgetSpec ` + "`json:\"spec\"`" + `
}

type WidgetSpec struct {
	RestartPolicy string ` + "`json:\"restartPolicy\"`" + `
}

type part struct{ weight int }

func (w *Widget) Grow() { workqueue.ParallelizeUntil(nil, 1, 1, nil) }

func NewWidget() *Widget { return nil }

var defaultSize = 3

func reasonOf() string { return "WidgetGrown" }
`,
		"internal/widget/widget_test.go": "package widget\n\nfunc TestWidgetGrows() {}\n",
		"cmd/main.go": "package main\n\nimport w \"github.com/indexed-batch-job/indexed-batch-job/internal/widget\"\n\n" +
			"func main() { _ = w.NewWidget() }\n",
		"hack/demo.sh":  "#!/bin/sh\n",
		"config/a.yaml": "a: 1\n",
		"PAGE.md": "# Page\n\n" +
			"Present: `widget.NewWidget()`, `w.NewWidget`, `Widget.Grow()`, `Widget.Size`, `widget.Widget.parts`,\n" +
			"`Widget.Spec.RestartPolicy`, `defaultSize`, `TestWidgetGrows`, `internal/widget/widget.go`, `internal/widget/`,\n" +
			"`internal/{widget,widget}`, `cmd/*.go`, `main.go`, `config/<file>.yaml`, `internal/...`, `workqueue.ParallelizeUntil`,\n" +
			"`restartPolicy`, `WidgetGrown`, `Widget.Grow(ctx,\n  n)`.\n\n" +
			"Not names: `make test`, `go test ./...`, `--flag-name`, `IBJ_X=1`, `/etc/widget`, `~/.kube/config`, `bin/tool`,\n" +
			"`dist/install.yaml`, `batch/v1`, `sigs.k8s.io/kueue`, `kwok.indexedjob.dev/*`, `spec.indexes`, `Failed`,\n" +
			"`https://example.com/a/b.md`, `<dir>/out`, `JOB_COMPLETION_INDEX`.\n\n" +
			"```\n`oldHelper` in a fence\n```\n\n" +
			"Stale: `oldHelper`, `widget.OldWidget`, `Widget.Shrink()`, `Widget.parts.mass`, `w.Gone`, `Gadget.Size`,\n" +
			"`internal/gadget/gadget.go`, `hack/{demo,lib}.sh`, `old.go`, `workqueue.Parallelize`.\n",
	} {
		file := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	x, err := newGoIndex(dir)
	if err != nil {
		t.Fatal(err)
	}
	paths, err := repoPaths(dir)
	if err != nil {
		t.Fatal(err)
	}
	got, err := staleNames(dir, "PAGE.md", x, paths)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"PAGE.md:17: `oldHelper`: no Go declaration, string or struct tag of the tree holds it",
		"PAGE.md:17: `widget.OldWidget`: widget declares no OldWidget",
		"PAGE.md:17: `Widget.Shrink()`: Widget declares no Shrink",
		"PAGE.md:17: `Widget.parts.mass`: Widget.parts declares no mass",
		"PAGE.md:17: `w.Gone`: w declares no Gone",
		"PAGE.md:17: `Gadget.Size`: Gadget is no package, type or imported package of the tree",
		"PAGE.md:18: `internal/gadget/gadget.go`: the tree holds no internal/gadget/gadget.go",
		"PAGE.md:18: `hack/{demo,lib}.sh`: the tree holds no hack/lib.sh",
		"PAGE.md:18: `old.go`: the tree holds no old.go",
		"PAGE.md:18: `workqueue.Parallelize`: workqueue declares no Parallelize",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("stale names (-want +got):\n%s", diff)
	}
}

func TestCodeSpans(t *testing.T) {
	got := codeSpans("a `one` b ``two `x` two``\n`three\nlines` `not\n\nclosed `four`\n```\n`fenced`\n```\n`five`\n")
	want := []docSpan{{"one", 1}, {"two `x` two", 1}, {"three lines", 2}, {"four", 5}, {"five", 9}}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(docSpan{})); diff != "" {
		t.Errorf("codeSpans (-want +got):\n%s", diff)
	}
}
