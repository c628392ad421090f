package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/examples"
	"github.com/rivet-go/rivet/examples/exampleapi"
	"github.com/rivet-go/rivet/examples/seed"
	"github.com/rivet-go/rivet/examples/tutorial/order"
	"github.com/rivet-go/rivet/node"
)

// The shell sessions of docs/examples.md, docs/tutorial.md and of the
// README are what a user compares their terminal with: TestDocSessions runs
// each command they show, in order, against a node hosting the example
// actors as cmd/node does (the tutorial's order actor, for its page), and
// compares what rivetctl prints with what the page says, after
// the few normalizations the page announces (times, node IDs, partitions,
// Unix milliseconds and schedule IDs). A manual audit found five false
// statements there that nothing caught.
//
// What the pages may contain, in a ```sh block:
//
//   - "$ go run ./cmd/rivetctl ARGS", several joined by "; ", an optional
//     "sleep N; " before them and "&" after (run in the background, its
//     output interleaved with what follows), a "# comment" at the end;
//     ARGS are shell words ('...', "..." with \" and the doc's
//     $(( $(date +%s) * 1000 + N )) for a time N ms from now);
//   - the lines after it: what the command prints, stdout and stderr as
//     the terminal shows them; a line "..." stands for any lines.
//
// A "sleep N" becomes a wait: the command, which must only read (history,
// inspect, actors, state, call getState, call --read-only), runs again
// until its output matches or a deadline passes (N and 20 s more); the
// commands that only read are retried so anyway, as the workflow they look
// at runs after the send they follow.
// A block whose commands are not "go run ./cmd/rivetctl" (a user's own
// actors, "$ rivetctl ...") is not run. A comment right before a block
// changes how it is checked:
//
//	<!-- not checked: why -->                          it is not run
//	<!-- node: new, without EXAMPLES_API_URL -->       on a new node without the API
//	<!-- node: restarted, with EXAMPLES_API_URL -->    on that node, restarted with it
func TestDocSessions(t *testing.T) {
	for _, page := range []struct {
		path     string
		registry func() (*rivet.Registry, error)
	}{
		{"../../README.md", examples.Registry},
		{"../../docs/examples.md", examples.Registry},
		{"../../docs/tutorial.md", func() (*rivet.Registry, error) { return rivet.Setup(order.Actor) }},
	} {
		t.Run(filepath.Base(page.path), func(t *testing.T) {
			page, registry := page.path, page.registry
			blocks, err := parseDocBlocks(page)
			if err != nil {
				t.Fatal(err)
			}
			checked, skipped := 0, 0
			for _, b := range blocks {
				if b.skip == "" {
					checked += len(b.cmds)
				} else {
					skipped++
				}
			}
			// A page whose sessions the parser no longer sees (a fence
			// written otherwise) must not pass by checking nothing.
			if checked == 0 {
				t.Fatalf("%s: no rivetctl session found", page)
			}
			t.Logf("%s: %d commands to check, %d blocks not checked", page, checked, skipped)
			runDocBlocks(t, page, registry, blocks)
		})
	}
}

// docCmd is one "$ " line of a page and what it should print.
type docCmd struct {
	line  int
	text  string
	sleep time.Duration // "sleep N; " before it: wait for its output, up to N and 20 s more
	argv  [][]string    // one rivetctl command line each
	bg    bool          // "&": runs on in the background
	want  []string
}

type docBlock struct {
	line        int
	skip, nodeD string
	cmds        []docCmd
}

// parseDocBlocks reads the ```sh blocks of the page that run rivetctl.
func parseDocBlocks(path string) ([]docBlock, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var (
		blocks  []docBlock
		cur     *docBlock
		comment string // the HTML comment just before a fence
		n       int
	)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		n++
		line := sc.Text()
		if cur == nil {
			switch {
			case strings.HasPrefix(line, "<!--") && strings.HasSuffix(line, "-->"):
				comment = strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(line, "<!--"), "-->"))
			case line == "```sh":
				cur = &docBlock{line: n}
				switch {
				case strings.HasPrefix(comment, "not checked: "):
					cur.skip = strings.TrimPrefix(comment, "not checked: ")
				case strings.HasPrefix(comment, "node: "):
					cur.nodeD = strings.TrimPrefix(comment, "node: ")
				case comment != "":
					return nil, fmt.Errorf("%s:%d: comment %q before a block: want 'not checked: why' or 'node: ...'", path, n, comment)
				}
				comment = ""
			case strings.TrimSpace(line) != "":
				comment = ""
			}
			continue
		}
		if line == "```" {
			if b, err := cur.finish(path); err != nil {
				return nil, err
			} else if b {
				blocks = append(blocks, *cur)
			}
			cur = nil
			continue
		}
		if strings.HasPrefix(line, "$ ") {
			cur.cmds = append(cur.cmds, docCmd{line: n, text: strings.TrimPrefix(line, "$ ")})
		} else if len(cur.cmds) > 0 {
			c := &cur.cmds[len(cur.cmds)-1]
			c.want = append(c.want, line)
		}
	}
	return blocks, sc.Err()
}

var (
	sleepPrefix = regexp.MustCompile(`^sleep ([0-9.]+); `)
	dateMillis  = regexp.MustCompile(`\$\(\( \$\(date \+%s\) \* 1000 \+ ([0-9]+) \)\)`)
)

// finish parses the block's commands; it reports whether the block runs
// rivetctl at all.
func (b *docBlock) finish(path string) (bool, error) {
	if len(b.cmds) == 0 {
		return false, nil
	}
	ours := 0
	for i := range b.cmds {
		c := &b.cmds[i]
		if m := sleepPrefix.FindStringSubmatch(c.text); m != nil {
			secs, err := strconv.ParseFloat(m[1], 64)
			if err != nil || secs <= 0 {
				return false, fmt.Errorf("%s:%d: sleep %q: want a number of seconds over 0", path, c.line, m[1])
			}
			c.sleep = time.Duration(secs * float64(time.Second))
		}
		if strings.HasPrefix(strings.TrimPrefix(c.text, sleepPrefix.FindString(c.text)), "go run ./cmd/rivetctl ") {
			ours++
		}
	}
	switch {
	case ours == 0:
		return false, nil // a user's own actors ("$ rivetctl ...")
	case b.skip != "":
		return true, nil
	case ours != len(b.cmds):
		return false, fmt.Errorf("%s:%d: a block that mixes go run ./cmd/rivetctl with other commands (mark it <!-- not checked: why -->)", path, b.line)
	}
	for i := range b.cmds {
		c := &b.cmds[i]
		words, err := shellWords(strings.TrimPrefix(c.text, sleepPrefix.FindString(c.text)))
		if err != nil {
			return false, fmt.Errorf("%s:%d: %v", path, c.line, err)
		}
		if len(words) > 0 && words[len(words)-1] == "&" {
			c.bg = true
			words = words[:len(words)-1]
		}
		var cmd []string
		for _, w := range append(words, ";") {
			switch w {
			case ";":
				if len(cmd) < 3 || cmd[0] != "go" || cmd[1] != "run" || cmd[2] != "./cmd/rivetctl" {
					return false, fmt.Errorf("%s:%d: %q: a command other than go run ./cmd/rivetctl (mark the block <!-- not checked: why -->)", path, c.line, c.text)
				}
				c.argv = append(c.argv, cmd[3:])
				cmd = nil
			case "&":
				return false, fmt.Errorf("%s:%d: & before the end", path, c.line)
			default:
				cmd = append(cmd, w)
			}
		}
		if c.sleep > 0 && !readOnly(c.argv) {
			return false, fmt.Errorf("%s:%d: a sleep before %q, which cannot be run again until it matches", path, c.line, c.text)
		}
		if c.bg && (len(c.argv) != 1 || len(c.want) > 0) {
			return false, fmt.Errorf("%s:%d: a background command must be alone on its line, with no output", path, c.line)
		}
	}
	return true, nil
}

// readOnly says whether running the commands again changes nothing.
func readOnly(argv [][]string) bool {
	for _, args := range argv {
		args = withoutGlobalFlags(args)
		if len(args) == 0 {
			return false
		}
		switch args[0] {
		case "history", "inspect", "actors", "state":
		case "call":
			if len(args) >= 2 && args[1] == "--read-only" {
				break // a query, which creates no actor either
			}
			if len(args) < 4 || (args[3] != "getState" && args[3] != "getCount") {
				return false
			}
		default:
			return false
		}
	}
	return true
}

func withoutGlobalFlags(args []string) []string {
	for len(args) >= 2 && (args[0] == "-o" || args[0] == "--output") {
		args = args[2:]
	}
	return args
}

// shellWords splits a command line as sh would the doc's: words, '...',
// "..." (with \", \\ and \$), the time arithmetic, ";", "&" and a comment.
func shellWords(s string) ([]string, error) {
	s = dateMillis.ReplaceAllStringFunc(s, func(m string) string {
		add, _ := strconv.ParseInt(dateMillis.FindStringSubmatch(m)[1], 10, 64)
		return strconv.FormatInt(time.Now().Unix()*1000+add, 10)
	})
	var (
		words []string
		w     strings.Builder
		inW   bool
	)
	flush := func() {
		if inW {
			words = append(words, w.String())
		}
		w.Reset()
		inW = false
	}
	for i := 0; i < len(s); i++ {
		switch ch := s[i]; ch {
		case ' ', '\t':
			flush()
		case ';', '&':
			flush()
			words = append(words, string(ch))
		case '#':
			if inW {
				w.WriteByte(ch)
				continue
			}
			flush()
			return words, nil
		case '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, fmt.Errorf("unterminated ' in %q", s)
			}
			w.WriteString(s[i+1 : i+1+j])
			inW = true
			i += j + 1
		case '"':
			inW = true
			for i++; ; i++ {
				if i >= len(s) {
					return nil, fmt.Errorf(`unterminated " in %q`, s)
				}
				if s[i] == '"' {
					break
				}
				if s[i] == '$' || s[i] == '`' {
					return nil, fmt.Errorf("an expansion the test does not know in %q", s)
				}
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte(`"\$`, s[i+1]) >= 0 {
					i++
				}
				w.WriteByte(s[i])
			}
		case '$', '`', '|', '>', '<', '(', ')', '\\':
			return nil, fmt.Errorf("%q: shell syntax the test does not run (%c)", s, ch)
		default:
			w.WriteByte(ch)
			inW = true
		}
	}
	flush()
	return words, nil
}

// The normalizations of what the page says differs from run to run. Each
// rewrites both the page's lines and rivetctl's output, so the width of
// what it replaces matters only where it varies (a partition in a table).
var docNormalize = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\b`), "<time>"},
	{regexp.MustCompile(`\bnode-[0-9a-f]{8}\b`), "node-<id>"},
	// inspect's "partition  644", create's "(partition 644, owner ...)",
	// and the PARTITION column of actors (with its padding).
	{regexp.MustCompile(`^partition( +)\d+$`), "partition$1<p>"},
	{regexp.MustCompile(`\(partition \d+, owner `), "(partition <p>, owner "},
	{regexp.MustCompile(`^(\S+ +\S+ +)\d+ +(node-)`), "$1<p> $2"},
	// Unix milliseconds (a reminder's "at", a session's expiry), and the
	// ID of a scheduled call made of them.
	{regexp.MustCompile(`\b1\d{12}\b`), "<ms>"},
	{regexp.MustCompile(`<ms>-[0-9a-f]{16}\b`), "<ms>-<id>"},
}

func normalizeDoc(lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		for _, n := range docNormalize {
			l = n.re.ReplaceAllString(l, n.with)
		}
		out[i] = l
	}
	return out
}

// matchLines: got is want, a line "..." in want standing for any lines.
func matchLines(want, got []string) bool {
	if len(want) == 0 {
		return len(got) == 0
	}
	if strings.TrimSpace(want[0]) == "..." {
		for i := 0; i <= len(got); i++ {
			if matchLines(want[1:], got[i:]) {
				return true
			}
		}
		return false
	}
	return len(got) > 0 && got[0] == want[0] && matchLines(want[1:], got[1:])
}

// matchInterleaved: want is fg's lines and bg's, interleaved (the two
// processes write to one terminal); "..." is not allowed then.
func matchInterleaved(want, fg, bg []string) bool {
	if len(bg) == 0 {
		return matchLines(want, fg)
	}
	if len(want) == 0 {
		return len(fg) == 0 && len(bg) == 0
	}
	if len(fg) > 0 && fg[0] == want[0] && matchInterleaved(want[1:], fg[1:], bg) {
		return true
	}
	return bg[0] == want[0] && matchInterleaved(want[1:], fg, bg[1:])
}

func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

// syncBuffer is a terminal that two commands write to.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// since returns what was written after offset, and the new offset.
func (s *syncBuffer) since(off int) (string, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()[off:], s.b.Len()
}

// docNode is a node hosting the examples, as cmd/node runs it.
type docNode struct {
	t   *testing.T
	dir string
	n   *node.Node
}

func startDocNode(t *testing.T, dir string, registry func() (*rivet.Registry, error)) *docNode {
	t.Helper()
	cfg, err := node.ParseFlags("node", []string{"--data-dir", dir, "--grpc-addr", "127.0.0.1:0", "--http-addr", "-",
		"--etcd-client-addr", "127.0.0.1:0", "--etcd-peer-addr", "127.0.0.1:0", "--gossip-addr", "-"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Logger = zap.NewNop()
	reg, err := registry()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := node.Start(ctx, cfg, reg)
	if err != nil {
		t.Fatal(err)
	}
	d := &docNode{t: t, dir: dir, n: n}
	t.Cleanup(d.stop)
	return d
}

func (d *docNode) stop() {
	if d.n == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := d.n.Stop(ctx); err != nil {
		d.t.Errorf("node stop: %v", err)
	}
	d.n = nil
}

func runDocBlocks(t *testing.T, page string, registry func() (*rivet.Registry, error), blocks []docBlock) {
	api := exampleapi.NewTestServer(map[string]int{"/users": 3, "/orders": 5, "/revenue": 7, "/invoices": 11})
	defer api.Close()
	t.Setenv(exampleapi.EnvVar, api.URL)
	// The page's node runs with EXAMPLES_AUCTION_TIMEOUT=10s.
	t.Setenv(seed.AuctionTimeoutEnv, "10s")
	saved := seed.AuctionTimeout
	defer func() { seed.AuctionTimeout = saved }()

	nd := startDocNode(t, t.TempDir(), registry)
	// Before the API closes and the timeout is put back.
	defer func() { nd.stop() }()
	for _, b := range blocks {
		if b.skip != "" {
			t.Logf("%s:%d: not checked: %s", page, b.line, b.skip)
			continue
		}
		switch b.nodeD {
		case "":
		case "new, without EXAMPLES_API_URL":
			nd.stop()
			os.Unsetenv(exampleapi.EnvVar)
			nd = startDocNode(t, t.TempDir(), registry)
		case "restarted, with EXAMPLES_API_URL":
			nd.stop()
			os.Setenv(exampleapi.EnvVar, api.URL)
			nd = startDocNode(t, nd.dir, registry)
		default:
			t.Fatalf("%s:%d: unknown node directive %q", page, b.line, b.nodeD)
		}
		addr := nd.n.GRPCAddr()
		getenv := func(k string) string {
			if k == client.EndpointEnv {
				return addr
			}
			return ""
		}
		runDocBlock(t, page, b, nd, getenv)
	}
}

// runDocBlock runs the block's commands; those in the background end with
// the block, as the page says no more of them.
func runDocBlock(t *testing.T, page string, b docBlock, nd *docNode, getenv func(string) string) {
	ctx, cancel := context.WithCancel(context.Background())
	var bgDone sync.WaitGroup
	defer func() { cancel(); bgDone.Wait() }()
	var bg syncBuffer
	bgRunning := false
	for _, c := range b.cmds {
		if c.bg {
			subs := nd.n.Host().Stats().EventSubscribers
			bgRunning = true
			bgDone.Add(1)
			go func() {
				defer bgDone.Done()
				run(ctx, c.argv[0], strings.NewReader(""), &bg, &bg, getenv)
			}()
			// The doc's watch runs before what it watches: wait
			// until it has subscribed.
			waitFor(t, 20*time.Second, func() bool { return nd.n.Host().Stats().EventSubscribers > subs }, "%s:%d: %s subscribes", page, c.line, c.text)
			continue
		}
		runDocCmd(t, page, c, &bg, bgRunning, getenv)
	}
}

// runDocCmd runs the command (and again, if it only reads, until its
// output matches or 20 s pass) and compares its output with the page's.
func runDocCmd(t *testing.T, page string, c docCmd, bg *syncBuffer, bgRunning bool, getenv func(string) string) {
	t.Helper()
	want := normalizeDoc(c.want)
	// Under go run a failure also prints "exit status N", which the page
	// leaves out: it shows one by rivetctl's message alone.
	wantFail := false
	for _, l := range c.want {
		if strings.HasPrefix(l, "rivetctl: ") && !strings.HasPrefix(l, "rivetctl: note: ") {
			wantFail = true
		}
	}
	start := time.Now()
	runs := 0
	defer func() {
		if took := time.Since(start); took > time.Second {
			t.Logf("%s:%d: %v, %d runs", page, c.line, took.Round(10*time.Millisecond), runs)
		}
	}()
	// A command after "sleep N" waits for what happens in N: up to N
	// and the 20 s every command that reads has.
	deadline := start.Add(c.sleep + 20*time.Second)
	_, bgOff := bg.since(0)
	for {
		runs++
		var out syncBuffer
		failed := false
		for _, args := range c.argv {
			if run(context.Background(), args, strings.NewReader(""), &out, &out, getenv) != exitOK {
				failed = true
			}
		}
		got, _ := out.since(0)
		var fromBg string
		var ok bool
		gotLines := normalizeDoc(splitLines(got))
		// Events the background watch prints after the command: give
		// them a moment to arrive.
		for wait := time.Now().Add(5 * time.Second); ; {
			if !bgRunning {
				fromBg, ok = "", matchLines(want, gotLines)
				break
			}
			fromBg, _ = bg.since(bgOff)
			if ok = matchInterleaved(want, gotLines, normalizeDoc(splitLines(fromBg))); ok || time.Now().After(wait) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if ok && failed != wantFail {
			t.Errorf("%s:%d: $ %s\nprinted what the page says, but failed (exit status not 0): %v; the page shows a failure by a line \"rivetctl: ...\" (not \"rivetctl: note: ...\"): %v", page, c.line, c.text, failed, wantFail)
			return
		}
		if ok {
			return
		}
		if !readOnly(c.argv) || time.Now().After(deadline) {
			t.Errorf("%s:%d: $ %s\nprinted:\n%s%s\nthe page says:\n%s", page, c.line, c.text, got, indentBg(fromBg), strings.Join(c.want, "\n"))
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func indentBg(s string) string {
	if s == "" {
		return ""
	}
	return "(and in the background)\n" + s
}

func waitFor(t *testing.T, within time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: "+format, args...)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
