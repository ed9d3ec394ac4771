package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// layoutPage is the page that names every directory holding Go code.
const layoutPage = "docs/layout.md"

// braces is one {a,b,...} group of a name in layoutPage.
var braces = regexp.MustCompile(`\{([^{}]*)\}`)

// expand gives each name a code span of layoutPage stands for: the span
// itself with any trailing '/' dropped, and one name for each choice of
// each {a,b} group in it.
func expand(span string) []string {
	span = strings.TrimSuffix(strings.Trim(span, "`"), "/")
	loc := braces.FindStringSubmatchIndex(span)
	if loc == nil {
		return []string{span}
	}
	var out []string
	for _, choice := range strings.Split(span[loc[2]:loc[3]], ",") {
		out = append(out, expand(span[:loc[0]]+strings.TrimSpace(choice)+span[loc[1]:])...)
	}
	return out
}

// namedInLayout is every name the code spans of layoutPage stand for.
func namedInLayout(t *testing.T) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, layoutPage))
	if err != nil {
		t.Fatal(err)
	}
	named := map[string]bool{}
	for _, span := range codeSpan.FindAllString(string(data), -1) {
		for _, name := range expand(span) {
			named[name] = true
		}
	}
	return named
}

// skipped are directories whose Go files are not the project's code: build
// output, and Go's own conventions for what the go tool ignores.
func skipped(rel string, name string) bool {
	switch {
	case rel == "bin", rel == "dist":
		return true
	case name == "testdata", name == "vendor", name == "node_modules":
		return true
	case strings.HasPrefix(name, "."), strings.HasPrefix(name, "_"):
		return rel != "."
	}
	return false
}

// goDirs is every directory of the repository holding a .go file,
// relative to its root, with '/' separators.
func goDirs(t *testing.T) []string {
	t.Helper()
	seen := map[string]bool{}
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(repoRoot, path)
		if err != nil {
			return err
		}
		if d.IsDir() {
			if skipped(filepath.ToSlash(rel), d.Name()) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(d.Name(), ".go") {
			seen[filepath.ToSlash(filepath.Dir(rel))] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	dirs := make([]string, 0, len(seen))
	for dir := range seen {
		dirs = append(dirs, dir)
	}
	slices.Sort(dirs)
	return dirs
}

// TestLayoutNamesEveryGoDirectory fails, naming each, for a directory that
// holds Go code but is not in docs/layout.md's tables, and for a name there
// that is no directory of the repository (one moved or removed).
func TestLayoutNamesEveryGoDirectory(t *testing.T) {
	named := namedInLayout(t)
	dirs := goDirs(t)
	if len(dirs) == 0 {
		t.Fatal("found no directory holding Go code: is repoRoot the repository's root?")
	}
	for _, dir := range dirs {
		if !named[dir] {
			t.Errorf("%s holds Go code but %s does not name it: add a row for `%s` saying what it holds", dir, layoutPage, dir)
		}
	}
	for name := range named {
		if stale(name) {
			t.Errorf("%s names `%s`, which is not in the repository: remove or fix its row", layoutPage, name)
		}
	}
}

// generated are the top-level directories that hold only what the
// Makefile builds (ignored by git): a path there exists once built, and a
// fresh clone has none of it.
var generated = map[string]bool{"bin": true, "dist": true}

// stale reports whether name reads as a path of the repository (it starts
// with one of its top-level directories) yet is neither a directory nor a
// file there.
func stale(name string) bool {
	first, _, ok := strings.Cut(name, "/")
	if !ok || strings.ContainsAny(name, " *(") || generated[first] {
		return false
	}
	if info, err := os.Stat(filepath.Join(repoRoot, first)); err != nil || !info.IsDir() {
		return false // batch/v1, scheduling.k8s.io/v1beta1: not a path
	}
	_, err := os.Stat(filepath.Join(repoRoot, filepath.FromSlash(name)))
	return err != nil
}

func TestExpandBraces(t *testing.T) {
	got := expand("`a/{b,c}/d/{e,f}/`")
	want := []string{"a/b/d/e", "a/b/d/f", "a/c/d/e", "a/c/d/f"}
	if !slices.Equal(got, want) {
		t.Errorf("expand = %v, want %v", got, want)
	}
}
