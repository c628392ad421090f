package order_test

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const tutorialPage = "../../../docs/tutorial.md"

// goBlock is a ```go block of the page: its first line's number, its text.
type goBlock struct {
	line int
	text string
}

func tutorialGoBlocks(t *testing.T) []goBlock {
	t.Helper()
	page, err := os.ReadFile(tutorialPage)
	if err != nil {
		t.Fatal(err)
	}
	var (
		blocks []goBlock
		cur    *goBlock
	)
	sc := bufio.NewScanner(bytes.NewReader(page))
	for n := 1; sc.Scan(); n++ {
		switch line := sc.Text(); {
		case cur == nil && line == "```go":
			cur = &goBlock{line: n + 1}
		case cur != nil && line == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.text += line + "\n"
		}
	}
	if cur != nil {
		t.Fatalf("%s:%d: a ```go block without its end", tutorialPage, cur.line)
	}
	return blocks
}

// The Go code of docs/tutorial.md is the code of this package and of its
// node, as it is there: each ```go block is lines of one of their files,
// whole lines in a row, so that the page shows code that builds and passes
// these tests, and a change of the code that the page does not follow fails
// here. And order.go is on the page whole: the tutorial says so.
func TestTutorialCodeIsThePackagesCode(t *testing.T) {
	var names []string
	for _, dir := range []string{".", "../ordernode"} {
		m, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, m...)
	}
	files := map[string]string{}
	for _, name := range names {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		files[name] = string(b)
	}
	blocks := tutorialGoBlocks(t)
	// A page whose blocks the parser no longer sees must not pass by
	// checking nothing.
	if len(blocks) < 8 {
		t.Fatalf("%s: %d ```go blocks, want the 8 or more the tutorial has", tutorialPage, len(blocks))
	}
	orderLines := strings.SplitAfter(files["order.go"], "\n")
	covered := make([]bool, len(orderLines))
	for _, b := range blocks {
		found := false
		for name, text := range files {
			i := strings.Index("\n"+text, "\n"+b.text)
			if i < 0 {
				continue
			}
			found = true
			if name == "order.go" {
				first := strings.Count(text[:i], "\n")
				for j := range strings.Count(b.text, "\n") {
					covered[first+j] = true
				}
			}
		}
		if !found {
			t.Errorf("%s:%d: a ```go block that is in none of %v as it is; its first line that is nowhere: %q",
				tutorialPage, b.line, names, firstLineNowhere(b.text, files))
		}
	}
	// From the first declaration after the imports to the end.
	start := strings.Index(files["order.go"], "\n)\n") + len("\n)\n")
	for i, l := range orderLines {
		if strings.TrimSpace(l) != "" && !covered[i] && len(strings.Join(orderLines[:i], "")) >= start {
			t.Errorf("order.go:%d: %q is not on the page (%s): the tutorial shows order.go whole", i+1, strings.TrimSpace(l), tutorialPage)
		}
	}
}

// firstLineNowhere returns the block's first line that no file has, or
// the block's first line if each is somewhere (the lines are in another
// order there).
func firstLineNowhere(block string, files map[string]string) string {
	lines := strings.Split(strings.TrimSuffix(block, "\n"), "\n")
	for _, l := range lines {
		found := false
		for _, text := range files {
			if strings.Contains("\n"+text, "\n"+l+"\n") {
				found = true
				break
			}
		}
		if !found {
			return l
		}
	}
	return lines[0]
}
