// Package docs holds the project's documentation pages. Its test checks that
// they hold together: every relative link of README.md, DEVELOPERS.md and the
// pages under docs/ points at a file that exists (and, with a #fragment, at a
// heading of it), every page under docs/ can be reached from README.md by
// following links, README.md stays short, docs/layout.md names every
// directory of the repository that holds Go code (layout_test.go), and every
// path and Go name in backticks on DEVELOPERS.md and docs/layout.md resolves
// against the tree (names_test.go).
package docs

import (
	"bufio"
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"unicode"
)

// repoRoot is the repository's root, relative to this package's directory.
const repoRoot = ".."

// readmeMaxLines is the most lines README.md may have: everything else is a
// page under docs/.
const readmeMaxLines = 200

var (
	// An inline link or image, [text](target "title"), and a reference
	// definition, [label]: target.
	inlineLink = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)`)
	refDef     = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s*<?([^\s>]+)>?`)
	atxHeading = regexp.MustCompile(`^\s{0,3}#{1,6}\s+(.*?)(?:\s+#+)?\s*$`)
	codeSpan   = regexp.MustCompile("`+[^`]*`+")
	linkText   = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	htmlAnchor = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
)

// slug is the anchor GitHub gives a heading: the text of its inline markup,
// lower-cased, spaces turned to '-', every character but letters, digits, '-'
// and '_' dropped.
func slug(heading string) string {
	heading = linkText.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// page is what the checks read from one markdown file.
type page struct {
	links   []link
	anchors map[string]bool
	lines   int
}

// link is one link of a page as written, and its line.
type link struct {
	target string
	line   int
}

// readPage reads a markdown file's links and the anchors of its headings
// (a repeated heading gets -1, -2, ... as on GitHub), skipping fenced code
// blocks and code spans.
func readPage(file string) (*page, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	p := &page{anchors: map[string]bool{}}
	repeats := map[string]int{}
	fence := ""
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		p.lines++
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:3]
			continue
		}
		for _, m := range htmlAnchor.FindAllStringSubmatch(line, -1) {
			p.anchors[m[1]] = true
		}
		if m := atxHeading.FindStringSubmatch(line); m != nil {
			a := slug(m[1])
			if n := repeats[a]; n > 0 {
				p.anchors[fmt.Sprintf("%s-%d", a, n)] = true
			} else {
				p.anchors[a] = true
			}
			repeats[a]++
		}
		text := codeSpan.ReplaceAllString(line, "")
		for _, m := range inlineLink.FindAllStringSubmatch(text, -1) {
			p.links = append(p.links, link{target: m[1], line: p.lines})
		}
		if m := refDef.FindStringSubmatch(text); m != nil {
			p.links = append(p.links, link{target: m[1], line: p.lines})
		}
	}
	return p, sc.Err()
}

// relative reports whether a link stays in the repository: not empty, no
// scheme (https:, mailto:), not protocol-relative.
func relative(target string) bool {
	if target == "" || strings.HasPrefix(target, "//") {
		return false
	}
	u, err := url.Parse(target)
	return err != nil || u.Scheme == ""
}

// resolve gives the repository path that a relative link of the page at from
// (a repository path, slash-separated) points at, and its fragment.
func resolve(from, target string) (string, string, error) {
	u, err := url.Parse(target)
	if err != nil {
		return "", "", err
	}
	p, err := url.PathUnescape(u.EscapedPath())
	if err != nil {
		return "", "", err
	}
	switch {
	case p == "":
		return from, u.Fragment, nil
	case strings.HasPrefix(p, "/"):
		return "", "", fmt.Errorf("GitHub resolves the absolute path %q against its host, not the repository", p)
	}
	resolved := path.Clean(path.Join(path.Dir(from), p))
	if resolved == ".." || strings.HasPrefix(resolved, "../") {
		return "", "", fmt.Errorf("%q leaves the repository", p)
	}
	return resolved, u.Fragment, nil
}

// tree is a directory of markdown pages (the repository, or a test's own),
// each page read once.
type tree struct {
	root  string
	pages map[string]*page
}

func newTree(root string) *tree { return &tree{root: root, pages: map[string]*page{}} }

func (t *tree) file(repoPath string) string {
	return filepath.Join(t.root, filepath.FromSlash(repoPath))
}

func (t *tree) page(repoPath string) (*page, error) {
	if p, ok := t.pages[repoPath]; ok {
		return p, nil
	}
	p, err := readPage(t.file(repoPath))
	if err != nil {
		return nil, err
	}
	t.pages[repoPath] = p
	return p, nil
}

// markdown gives the markdown page GitHub shows for a link's resolved path:
// the file itself, or a directory's README.md. ok is false for anything else
// (source files, pictures, a directory without a README.md).
func (t *tree) markdown(repoPath string) (string, bool) {
	info, err := os.Stat(t.file(repoPath))
	if err != nil {
		return "", false
	}
	if info.IsDir() {
		readme := path.Join(repoPath, "README.md")
		if _, err := os.Stat(t.file(readme)); err != nil {
			return "", false
		}
		return readme, true
	}
	return repoPath, strings.HasSuffix(repoPath, ".md")
}

// brokenLinks says what is wrong with the relative links of one page.
func (t *tree) brokenLinks(from string) ([]string, error) {
	p, err := t.page(from)
	if err != nil {
		return nil, err
	}
	var broken []string
	for _, l := range p.links {
		if !relative(l.target) {
			continue
		}
		report := func(format string, args ...any) {
			broken = append(broken, fmt.Sprintf("%s:%d: link %q: ", from, l.line, l.target)+fmt.Sprintf(format, args...))
		}
		target, fragment, err := resolve(from, l.target)
		if err != nil {
			report("%v", err)
			continue
		}
		if _, err := os.Stat(t.file(target)); err != nil {
			report("there is no %s", target)
			continue
		}
		if fragment == "" {
			continue
		}
		md, ok := t.markdown(target)
		if !ok {
			continue // a line of a source file (#L10), say
		}
		tp, err := t.page(md)
		if err != nil {
			return nil, err
		}
		if !tp.anchors[fragment] {
			report("%s has no heading whose anchor is #%s", md, fragment)
		}
	}
	return broken, nil
}

// reachable gives every markdown page that a chain of relative links leads to
// from the page start, start included.
func (t *tree) reachable(start string) (map[string]bool, error) {
	reached := map[string]bool{start: true}
	queue := []string{start}
	for len(queue) > 0 {
		from := queue[0]
		queue = queue[1:]
		p, err := t.page(from)
		if err != nil {
			return nil, err
		}
		for _, l := range p.links {
			if !relative(l.target) {
				continue
			}
			target, _, err := resolve(from, l.target)
			if err != nil {
				continue // brokenLinks reports it
			}
			if md, ok := t.markdown(target); ok && !reached[md] {
				reached[md] = true
				queue = append(queue, md)
			}
		}
	}
	return reached, nil
}

// docsPages gives the repository path of every markdown page under docs/.
func (t *tree) docsPages() ([]string, error) {
	var pages []string
	err := filepath.WalkDir(t.file("docs"), func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".md") {
			return err
		}
		rel, err := filepath.Rel(t.root, p)
		pages = append(pages, filepath.ToSlash(rel))
		return err
	})
	sort.Strings(pages)
	return pages, err
}

func TestRelativeLinksResolve(t *testing.T) {
	repo := newTree(repoRoot)
	docs, err := repo.docsPages()
	if err != nil {
		t.Fatal(err)
	}
	for _, from := range append([]string{"README.md", "DEVELOPERS.md"}, docs...) {
		broken, err := repo.brokenLinks(from)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range broken {
			t.Error(b)
		}
	}
}

func TestEveryDocsPageIsReachableFromTheREADME(t *testing.T) {
	repo := newTree(repoRoot)
	docs, err := repo.docsPages()
	if err != nil {
		t.Fatal(err)
	}
	reached, err := repo.reachable("README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range docs {
		if !reached[p] {
			t.Errorf("%s: no chain of links leads to it from README.md", p)
		}
	}
}

func TestREADMEIsShort(t *testing.T) {
	p, err := newTree(repoRoot).page("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if p.lines > readmeMaxLines {
		t.Errorf("README.md has %d lines, more than %d: move the detail to a page under docs/ and link it",
			p.lines, readmeMaxLines)
	}
}

func TestSlug(t *testing.T) {
	for _, c := range []struct{ heading, want string }{
		{"Using it with Kueue", "using-it-with-kueue"},
		{"Why not a plain `batch/v1` Job", "why-not-a-plain-batchv1-job"},
		{"The operator's `--kueue` flag", "the-operators---kueue-flag"},
		{"A 60 s kube-apiserver outage in a 2,000-index job", "a-60-s-kube-apiserver-outage-in-a-2000-index-job"},
		{"Reading of the 2026-11-26 01:53 run (see `results.md`)", "reading-of-the-2026-11-26-0153-run-see-resultsmd"},
		{"snake_case and a [link](x.md)", "snake_case-and-a-link"},
	} {
		if got := slug(c.heading); got != c.want {
			t.Errorf("slug(%q) = %q, want %q", c.heading, got, c.want)
		}
	}
}

// The checks must fail on broken links: a tree written for the test, with
// good links and one of each kind of broken link.
func TestBrokenLinksAreFound(t *testing.T) {
	dir := t.TempDir()
	for name, text := range map[string]string{
		"README.md": "# Top\n\n[guide](docs/guide.md#two-words) [dir](docs/sub/) [code](main.go#L3)\n" +
			"[gone](docs/missing.md) [bad anchor](docs/guide.md#nope) [outside](../x.md)\n" +
			"[web](https://example.com/x.md) `[span](docs/missing2.md)`\n\n```\n[fenced](docs/missing3.md)\n```\n",
		"main.go":            "package main\n",
		"docs/guide.md":      "# Guide\n\n## Two words\n\n## Two words\n\n[self](#two-words-1) [bad self](#three)\n",
		"docs/sub/README.md": "# Sub\n\n[up](../guide.md)\n",
		"docs/unreached.md":  "# Nobody links here\n",
	} {
		file := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tr := newTree(dir)
	var broken []string
	for _, from := range []string{"README.md", "docs/guide.md", "docs/sub/README.md"} {
		b, err := tr.brokenLinks(from)
		if err != nil {
			t.Fatal(err)
		}
		broken = append(broken, b...)
	}
	want := []string{
		`README.md:4: link "docs/missing.md": there is no docs/missing.md`,
		`README.md:4: link "docs/guide.md#nope": docs/guide.md has no heading whose anchor is #nope`,
		`README.md:4: link "../x.md": "../x.md" leaves the repository`,
		`docs/guide.md:7: link "#three": docs/guide.md has no heading whose anchor is #three`,
	}
	if strings.Join(broken, "\n") != strings.Join(want, "\n") {
		t.Errorf("broken links:\n%s\nwant:\n%s", strings.Join(broken, "\n"), strings.Join(want, "\n"))
	}
	reached, err := tr.reachable("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !reached["docs/sub/README.md"] || !reached["docs/guide.md"] || reached["docs/unreached.md"] {
		t.Errorf("reachable from README.md: %v; want docs/guide.md and docs/sub/README.md, not docs/unreached.md", reached)
	}
}
