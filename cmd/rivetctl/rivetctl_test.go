package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/examples/counter"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/server"
	"github.com/rivet-go/rivet/server/servertest"
)

// result is one in-process run of rivetctl.
type result struct {
	code           int
	stdout, stderr string
}

// rivetctl runs the command line against addr, with no environment.
func rivetctl(t *testing.T, addr string, args ...string) result {
	t.Helper()
	return rivetctlEnv(t, map[string]string{}, append([]string{"--addr", addr}, args...)...)
}

func rivetctlEnv(t *testing.T, env map[string]string, args ...string) result {
	t.Helper()
	return rivetctlIn(t, "", env, args...)
}

// rivetctlIn runs the command line with stdin holding stdin.
func rivetctlIn(t *testing.T, stdin string, env map[string]string, args ...string) result {
	t.Helper()
	return rivetctlReading(t, strings.NewReader(stdin), env, args...)
}

// rivetctlReading runs the command line with stdin reading from r.
func rivetctlReading(t *testing.T, r io.Reader, env map[string]string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, r, &out, &errb, func(k string) string { return env[k] })
	return result{code, out.String(), errb.String()}
}

// slowReader gives data after a while, as a pipe from a slow producer.
type slowReader struct {
	after time.Duration
	data  io.Reader
	once  sync.Once
}

func (s *slowReader) Read(p []byte) (int, error) {
	s.once.Do(func() { time.Sleep(s.after) })
	return s.data.Read(p)
}

func (r result) want(t *testing.T, code int, stdout string) {
	t.Helper()
	if r.code != code || r.stdout != stdout {
		t.Errorf("exit %d, stdout:\n%s\nstderr: %s\nwant exit %d, stdout:\n%s", r.code, r.stdout, r.stderr, code, stdout)
	}
	if code == 0 && r.stderr != "" {
		t.Errorf("stderr on success: %s", r.stderr)
	}
}

// wantErr checks a failure: the exit code and the one line on stderr.
func (r result) wantErr(t *testing.T, code int, line string) {
	t.Helper()
	if r.code != code || r.stdout != "" || r.stderr != line+"\n" {
		t.Errorf("exit %d, stdout %q, stderr %q; want exit %d, stderr %q", r.code, r.stdout, r.stderr, code, line+"\n")
	}
}

// wantErrPrefix checks a failure whose one line on stderr starts with
// prefix.
func (r result) wantErrPrefix(t *testing.T, code int, prefix string) {
	t.Helper()
	if r.code != code || r.stdout != "" || !strings.HasPrefix(r.stderr, prefix) || strings.Count(r.stderr, "\n") != 1 {
		t.Errorf("exit %d, stdout %q, stderr %q; want exit %d, one line on stderr starting %q", r.code, r.stdout, r.stderr, code, prefix)
	}
}

func TestCall(t *testing.T) {
	t.Parallel()
	addr := servertest.Start(t, servertest.NewFake(), servertest.Config{})
	rivetctl(t, addr, "call", "counter", "main", "increment", "5").want(t, 0, "5\n")
	rivetctl(t, addr, "call", "counter", "main", "increment", "2", "-o", "json").want(t, 0, "7\n")
	rivetctl(t, addr, "call", "--no-create", "counter", "main", "getCount").want(t, 0, "7\n")
	rivetctl(t, addr, "call", "--read-only", "counter", "main", "getCount").want(t, 0, "7\n")
	rivetctl(t, addr, "call", "--read-only", "counter", "main", "increment", "1").
		wantErr(t, 1, "rivetctl: failed precondition: action increment of counter is not read-only (FAILED_PRECONDITION actor.not_read_only)")
	rivetctl(t, addr, "call", "counter", `["eu","main"]`, "getCount").want(t, 0, "0\n")
	rivetctl(t, addr, "history", "counter", "main").want(t, 0, "workflow  none (this actor has no workflow)\n")
	rivetctl(t, addr, "call", "counter", "", "increment", "1").
		wantErr(t, 2, `rivetctl: KEY is empty (for a key of one empty string, write '[""]')`)
	// An empty array too: a key has a component at least. (It went to
	// the node, which refused it: exit 1, as if the node were at fault.)
	for _, key := range []string{"[]", "[ ]"} {
		rivetctl(t, addr, "call", "counter", key, "increment", "1").
			wantErr(t, 2, fmt.Sprintf(`rivetctl: KEY %q is empty: a key has at least one component (for a key of one empty string, write '[""]')`, key))
		rivetctl(t, addr, "-o", "json", "state", "counter", key).
			wantErrPrefix(t, 2, `{"error":{"code":"USAGE","message":"KEY `)
	}
	// A value from a file (@FILE) or from stdin (@-): a payload too big
	// for one argument of a command line.
	argFile := filepath.Join(t.TempDir(), "arg.json")
	if err := os.WriteFile(argFile, []byte(" 3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rivetctl(t, addr, "call", "counter", "main", "increment", "@"+argFile).want(t, 0, "10\n")
	rivetctlIn(t, "4", map[string]string{}, "--addr", addr, "call", "counter", "main", "increment", "@-").want(t, 0, "14\n")
	rivetctlIn(t, "1", map[string]string{}, "--addr", addr, "call", "counter", "main", "increment", "@-", "@-").
		wantErr(t, 2, "rivetctl: argument 2: stdin (@-) was read already, by another value")
	rivetctl(t, addr, "call", "counter", "main", "increment", "@"+argFile+".missing").
		wantErrPrefix(t, 2, "rivetctl: argument 1: open ")
	rivetctlIn(t, "{nope", map[string]string{}, "--addr", addr, "send", "counter", "main", "q", "@-").
		wantErrPrefix(t, 2, "rivetctl: BODY_JSON (from stdin) is not valid JSON")
	rivetctlIn(t, " \n", map[string]string{}, "--addr", addr, "send", "counter", "main", "q", "@-").
		wantErr(t, 2, "rivetctl: BODY_JSON: stdin is empty")
	rivetctl(t, addr, "send", "counter", "main", "q", "@").
		wantErr(t, 2, `rivetctl: BODY_JSON: @ names no file (@FILE, or @- for stdin; a JSON string that starts with @ needs its quotes: '"@"')`)
	rivetctl(t, addr, "send", "counter", "main", "q", "@alice").
		wantErr(t, 2, `rivetctl: BODY_JSON: open alice: no such file or directory (a JSON string that starts with @ needs its quotes: '"@alice"')`)
	// --input with --no-create is refused before stdin is read.
	rivetctlReading(t, &slowReader{after: time.Hour, data: strings.NewReader("1")}, map[string]string{},
		"--addr", addr, "call", "--no-create", "--input", "@-", "counter", "main", "getCount").
		wantErr(t, 2, "rivetctl: --input makes no sense with --no-create")
	// Stdin is read before the deadline starts: a slow pipe is no timeout.
	rivetctlReading(t, &slowReader{after: 1500 * time.Millisecond, data: strings.NewReader("0")}, map[string]string{},
		"--addr", addr, "--timeout", "1s", "call", "counter", "main", "increment", "@-").want(t, 0, "14\n")
	rivetctl(t, addr, "call", "counter", "main", "increment", "--", "-7").want(t, 0, "7\n")

	rivetctl(t, addr, "call", "--no-create", "counter", "nope", "getCount").
		wantErr(t, 1, `rivetctl: not found: actor counter ["nope"] does not exist (NOT_FOUND actor.not_found)`)
	rivetctl(t, addr, "call", "counter", "main", "reset").
		wantErr(t, 1, `rivetctl: not found: actor counter has no action "reset" (NOT_FOUND actor.unknown_action)`)

	// With --output json, a failure is a JSON object on stderr.
	rivetctl(t, addr, "-o", "json", "call", "counter", "main", "reset").
		wantErr(t, 1, `{"error":{"code":"NOT_FOUND","reason":"actor.unknown_action","message":"actor counter has no action \"reset\""},"exit":1}`)
	rivetctl(t, addr, "-o", "json", "call", "counter", "", "increment", "1").
		wantErr(t, 2, `{"error":{"code":"USAGE","message":"KEY is empty (for a key of one empty string, write '[\"\"]')"},"exit":2}`)
	// UNAVAILABLE, or on a loaded machine the deadline, ending an attempt
	// in flight, with the refusal before it.
	if r := rivetctlEnv(t, map[string]string{}, "--addr", "127.0.0.1:1", "--timeout", "2s", "-o", "json", "members"); r.code != 1 ||
		!strings.HasPrefix(r.stderr, `{"error":{"code":"UNAVAILABLE","message":`) &&
			!(strings.HasPrefix(r.stderr, `{"error":{"code":"DEADLINE_EXCEEDED","message":`) && strings.Contains(r.stderr, "connection refused")) {
		t.Errorf("members of a port no one listens on: exit %d, stderr %s; want UNAVAILABLE (or the deadline after a refusal)", r.code, r.stderr)
	}
	// Failures before the flags are parsed, and a deadline.
	rivetctl(t, addr, "-o", "json", "nosuch").
		wantErr(t, 2, `{"error":{"code":"USAGE","message":"unknown command \"nosuch\" for \"rivetctl\""},"exit":2}`)
	rivetctl(t, addr, "members", "--bogus", "-o", "json").
		wantErr(t, 2, `{"error":{"code":"USAGE","message":"unknown flag: --bogus (see rivetctl members --help)"},"exit":2}`)
	silent, err := net.Listen("tcp", "127.0.0.1:0") // accepts, never answers
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	rivetctl(t, silent.Addr().String(), "--timeout", "300ms", "-o", "json", "members").
		wantErrPrefix(t, 1, `{"error":{"code":"DEADLINE_EXCEEDED","message":"deadline exceeded: no answer from`)
}

func TestCallArgs(t *testing.T) {
	f := servertest.NewFake()
	var got atomic.Value
	var calls atomic.Int32
	f.CallFunc = func(_ context.Context, req runtime.CallRequest) (json.RawMessage, error) {
		calls.Add(1)
		got.Store(string(req.Args) + " " + string(req.Input))
		return json.RawMessage(`{"b":[1,2],"a":"x"}`), nil
	}
	addr := servertest.Start(t, f, servertest.Config{})

	// Arguments are taken literally as JSON, the result printed indented.
	rivetctl(t, addr, "call", "greeter", "k", "greet", `"hi"`, `{"n": 1}`, "[]", "null", "--input", `{"lang":"fr"}`).
		want(t, 0, "{\n  \"b\": [\n    1,\n    2\n  ],\n  \"a\": \"x\"\n}\n")
	if got.Load() != `["hi",{"n": 1},[],null] {"lang":"fr"}` {
		t.Errorf("sent %v", got.Load())
	}
	rivetctl(t, addr, "-o", "json", "call", "greeter", "k", "greet").want(t, 0, `{"b":[1,2],"a":"x"}`+"\n")

	// Malformed arguments are usage errors; nothing is sent.
	calls.Store(0)
	rivetctl(t, addr, "call", "greeter", "k", "greet", "hello").
		wantErr(t, 2, `rivetctl: argument 1 is not valid JSON: hello (a string needs its quotes: '"hello"')`)
	rivetctl(t, addr, "call", "greeter", "k", "greet", "1", "{").
		wantErr(t, 2, `rivetctl: argument 2 is not valid JSON: { (unexpected end of JSON input; names and strings need double quotes, as in '{"sku":"a"}')`)
	rivetctl(t, addr, "call", "greeter", "k", "greet", `{sku:"a"}`).
		wantErr(t, 2, `rivetctl: argument 1 is not valid JSON: {sku:"a"} (invalid character 's' looking for beginning of object key string; names and strings need double quotes, as in '{"sku":"a"}')`)
	rivetctl(t, addr, "call", "greeter", `["a",`, "greet").
		wantErr(t, 2, `rivetctl: KEY "[\"a\"," starts with '[' but is not a JSON array of strings: unexpected end of JSON input`)
	// A null is no string: it is refused, not sent as the key [""].
	rivetctl(t, addr, "call", "greeter", `[null]`, "greet").
		wantErr(t, 2, `rivetctl: KEY "[null]" starts with '[' but is not a JSON array of strings: component 0 is null`)
	rivetctl(t, addr, "call", "greeter", `["a",null]`, "greet").
		wantErr(t, 2, `rivetctl: KEY "[\"a\",null]" starts with '[' but is not a JSON array of strings: component 1 is null`)
	// Nor is a byte that is not UTF-8, which JSON would decode as U+FFFD.
	rivetctl(t, addr, "call", "greeter", "[\"\xff\"]", "greet").
		wantErr(t, 2, `rivetctl: KEY "[\"\xff\"]" is not valid UTF-8`)
	rivetctl(t, addr, "call", "greeter", "k", "greet", "\"caf\xe9\"").
		wantErr(t, 2, `rivetctl: argument 1 is not valid UTF-8 (a file in another encoding? convert it to UTF-8)`)
	// Nor a lone surrogate escape, which JSON would decode as U+FFFD
	// too: I-JSON (RFC 7493) forbids it.
	rivetctl(t, addr, "call", "greeter", `["a","\udc00"]`, "greet").
		wantErr(t, 2, `rivetctl: KEY "[\"a\",\"\\udc00\"]" is not I-JSON (RFC 7493): \udc00 at byte 6 is a lone surrogate (half of a UTF-16 pair without its other half), which a decoder would turn into U+FFFD`)
	rivetctl(t, addr, "call", "greeter", "k", "greet", "1", `{"t":"x\ud800"}`).
		wantErr(t, 2, `rivetctl: argument 2 is not I-JSON (RFC 7493): \ud800 at byte 7 is a lone surrogate (half of a UTF-16 pair without its other half), which a decoder would turn into U+FFFD`)
	rivetctl(t, addr, "send", "greeter", "k", "q", `"\ud83d"`).
		wantErrPrefix(t, 2, `rivetctl: BODY_JSON is not I-JSON (RFC 7493): \ud83d at byte 1 is a lone surrogate`)
	rivetctl(t, addr, "call", "greeter", "k", "greet", "--input", "{").
		wantErr(t, 2, `rivetctl: --input is not valid JSON: { (unexpected end of JSON input; names and strings need double quotes, as in '{"sku":"a"}')`)
	if calls.Load() != 0 {
		t.Errorf("%d calls sent from malformed command lines", calls.Load())
	}
	// A surrogate pair is a character; an escaped backslash before
	// "ud800" is text.
	rivetctl(t, addr, "call", "greeter", `["\ud83d\ude00"]`, "greet", `"\ud83d\ude00"`, `"\\ud800"`).
		want(t, 0, "{\n  \"b\": [\n    1,\n    2\n  ],\n  \"a\": \"x\"\n}\n")
	if got.Load() != `["\ud83d\ude00","\\ud800"] ` {
		t.Errorf("sent %v", got.Load())
	}
}

func TestUsageErrors(t *testing.T) {
	addr := servertest.Start(t, servertest.NewFake(), servertest.Config{})
	for _, tc := range []struct {
		args []string
		line string
	}{
		{[]string{"call", "counter", "main"}, "rivetctl: usage: rivetctl call ACTOR KEY ACTION [ARG_JSON...] [flags] (got 2 arguments)"},
		{[]string{"state", "counter"}, "rivetctl: usage: rivetctl state ACTOR KEY [flags] (got 1 argument)"},
		{[]string{"frobnicate"}, `rivetctl: unknown command "frobnicate" for "rivetctl"`},
		{[]string{"members", "--bogus"}, "rivetctl: unknown flag: --bogus (see rivetctl members --help)"},
		{[]string{"members", "-o", "yaml"}, `rivetctl: --output must be text or json, not "yaml"`},
		{[]string{"members", "--timeout", "0s"}, "rivetctl: --timeout must be positive, not 0s"},
		{[]string{"call", "--no-create", "--input", "{}", "counter", "main", "getCount"}, "rivetctl: --input makes no sense with --no-create"},
		// A subcommand's switch before the command's name: cobra read the
		// name as its value, and said `unknown command "counter"`.
		{[]string{"--no-create", "call", "counter", "main", "getCount"}, "rivetctl: --no-create is a flag of rivetctl call and rivetctl send: it goes after the command (rivetctl call --no-create ...)"},
		{[]string{"-o", "text", "--failed", "actors"}, "rivetctl: --failed is a flag of rivetctl actors: it goes after the command (rivetctl actors --failed ...)"},
		{[]string{"--bogus", "members"}, "rivetctl: unknown flag: --bogus (see rivetctl --help)"},
	} {
		rivetctl(t, addr, tc.args...).wantErr(t, 2, tc.line)
	}
	if r := rivetctl(t, addr, "--help"); r.code != 0 || !strings.Contains(r.stdout, "Call actors and inspect") && !strings.Contains(r.stdout, "rivetctl calls actors") {
		t.Errorf("--help: %+v", r)
	}
}

func TestUserError(t *testing.T) {
	f := servertest.NewFake()
	f.CallFunc = func(context.Context, runtime.CallRequest) (json.RawMessage, error) {
		return nil, rivet.UserError("out_of_stock", "sku a1 is\nout of stock", nil)
	}
	addr := servertest.Start(t, f, servertest.Config{})
	rivetctl(t, addr, "call", "shop", "k", "buy", `"a1"`).
		wantErr(t, 1, "rivetctl: error: sku a1 is out of stock (UNKNOWN user.out_of_stock)")
}

func TestUnreachable(t *testing.T) {
	t.Parallel()
	r := rivetctl(t, "127.0.0.1:1", "call", "counter", "main", "getCount")
	if r.code != 1 || !strings.HasPrefix(r.stderr, "rivetctl: unavailable: ") || !strings.HasSuffix(r.stderr, " (UNAVAILABLE); is a node listening at 127.0.0.1:1? (--addr, or env RIVET_ENDPOINT)\n") || strings.Count(r.stderr, "\n") != 1 {
		t.Errorf("exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestSend(t *testing.T) {
	f := servertest.NewFake()
	addr := servertest.Start(t, f, servertest.Config{})
	rivetctl(t, addr, "send", "mailbox", "alice", "inbox", `{"text":"hi"}`).want(t, 0, "enqueued\n")
	rivetctl(t, addr, "send", "mailbox", "alice", "inbox", `{"text":"hi"}`, "-o", "json").want(t, 0, `{"message_id":2,"status":"enqueued"}`+"\n")
	rivetctl(t, addr, "send", "mailbox", "alice", "inbox", `{"text":"hi"}`, "--wait").
		want(t, 0, "completed (message 3)\n{\n  \"text\": \"hi\"\n}\n")
	rivetctl(t, addr, "send", "mailbox", "alice", "inbox", `[1]`, "--wait", "-o", "json").
		want(t, 0, `{"message_id":4,"status":"completed","response":[1]}`+"\n")
	rivetctl(t, addr, "send", "mailbox", "alice", "inbox", "hi").
		wantErr(t, 2, `rivetctl: BODY_JSON is not valid JSON: hi (a string needs its quotes: '"hi"')`)
	rivetctl(t, addr, "send", "--no-create", "mailbox", "bob", "inbox", "1").
		wantErr(t, 1, `rivetctl: not found: actor mailbox ["bob"] does not exist (NOT_FOUND actor.not_found)`)

	var timeout atomic.Int64
	f.SendFunc = func(_ context.Context, req runtime.SendRequest) (runtime.SendResult, error) {
		timeout.Store(int64(req.Timeout))
		return runtime.SendResult{MessageID: 9, Status: runtime.SendTimedOut, MessageState: runtime.MessageQueued}, nil
	}
	rivetctl(t, addr, "send", "mailbox", "alice", "inbox", "1", "--wait", "--wait-timeout", "1500ms").
		wantErr(t, 1, "rivetctl: not completed within the wait: message 9 is still queued")
	if timeout.Load() != int64(1500e6) {
		t.Errorf("wait timeout sent: %d", timeout.Load())
	}
	// --wait-timeout 0 is the node's default wait (30 s): the command's
	// deadline covers it, not only --timeout. (This node answers after
	// 1.5 s, past --timeout.)
	f.SendFunc = func(ctx context.Context, req runtime.SendRequest) (runtime.SendResult, error) {
		timeout.Store(int64(req.Timeout))
		select {
		case <-time.After(1500 * time.Millisecond):
			return runtime.SendResult{MessageID: 7, Status: runtime.SendTimedOut, MessageState: runtime.MessageQueued}, nil
		case <-ctx.Done():
			return runtime.SendResult{}, ctx.Err()
		}
	}
	rivetctl(t, addr, "--timeout", "1s", "send", "mailbox", "alice", "inbox", "1", "--wait", "--wait-timeout", "0").
		wantErr(t, 1, "rivetctl: not completed within the wait: message 7 is still queued")
	if timeout.Load() != 0 {
		t.Errorf("wait timeout sent for --wait-timeout 0: %d, want 0 (the node's default)", timeout.Load())
	}
	f.SendFunc = func(context.Context, runtime.SendRequest) (runtime.SendResult, error) {
		return runtime.SendResult{MessageID: 9, Status: runtime.SendTimedOut, MessageState: runtime.MessageTaken}, nil
	}
	rivetctl(t, addr, "send", "mailbox", "alice", "inbox", "1", "--wait").
		wantErr(t, 1, "rivetctl: not completed within the wait: the workflow took message 9 and has not completed it (only a workflow's Message.Complete answers a waiting sender)")
	// A node of an earlier version does not say.
	f.SendFunc = func(context.Context, runtime.SendRequest) (runtime.SendResult, error) {
		return runtime.SendResult{MessageID: 9, Status: runtime.SendTimedOut}, nil
	}
	rivetctl(t, addr, "send", "mailbox", "alice", "inbox", "1", "--wait").
		wantErr(t, 1, "rivetctl: not completed within the wait (message 9: still queued, or taken by a workflow that has not completed it)")
}

// send --idempotency-key carries the key; a duplicate says so on stdout
// (where scripts read the outcome; -o json's "duplicate"), and a duplicate
// that cannot wait for its message fails.
func TestSendWithAnIdempotencyKey(t *testing.T) {
	f := servertest.NewFake()
	var mu sync.Mutex
	sent := map[string]bool{}
	f.SendFunc = func(_ context.Context, req runtime.SendRequest) (runtime.SendResult, error) {
		mu.Lock()
		defer mu.Unlock()
		dup := sent[req.IdempotencyKey]
		sent[req.IdempotencyKey] = true
		return runtime.SendResult{MessageID: 5, Status: runtime.SendEnqueued, Duplicate: dup}, nil
	}
	addr := servertest.Start(t, f, servertest.Config{})
	rivetctl(t, addr, "send", "orders", "main", "incoming", "1", "--idempotency-key", "order-17").want(t, 0, "enqueued\n")
	// The duplicate says so on stdout, which scripts read, not
	// "enqueued".
	rivetctl(t, addr, "send", "orders", "main", "incoming", "1", "--idempotency-key", "order-17").
		want(t, 0, "duplicate of message 5: sent before with this idempotency key (by an earlier send, or by this one's first attempt if a broken connection cut it off and the client sent it again); nothing more was queued\n")
	rivetctl(t, addr, "send", "orders", "main", "incoming", "1", "--idempotency-key", "order-17", "-o", "json").
		want(t, 0, `{"message_id":5,"status":"enqueued","duplicate":true}`+"\n")
	rivetctl(t, addr, "send", "orders", "main", "incoming", "1", "--idempotency-key", "order-17", "--wait").
		wantErr(t, 1, "rivetctl: a duplicate: message 5 was sent before with this idempotency key (by an earlier send, or by this one's first attempt if a broken connection cut it off and the client sent it again), and this send cannot wait for it (the node stopped waiting, or the workflow took it and its completion cannot come here: the workflow ended, or the completion was too large to keep, or came before the node kept completions); nothing more was queued")
	// A duplicate that waited for the first message's completion.
	f.SendFunc = func(context.Context, runtime.SendRequest) (runtime.SendResult, error) {
		return runtime.SendResult{MessageID: 5, Status: runtime.SendCompleted, Duplicate: true, Response: json.RawMessage(`"ok"`)}, nil
	}
	rivetctl(t, addr, "send", "orders", "main", "incoming", "1", "--idempotency-key", "order-17", "--wait").
		want(t, 0, "completed (message 5, a duplicate: sent before with this idempotency key, by an earlier send, or by this one's first attempt if a broken connection cut it off and the client sent it again; nothing more was queued)\n\"ok\"\n")
	rivetctl(t, addr, "send", "orders", "main", "incoming", "1", "--idempotency-key", "order-17", "--wait", "-o", "json").
		want(t, 0, `{"message_id":5,"status":"completed","response":"ok","duplicate":true}`+"\n")
	// A duplicate sent to an actor whose workflow has ended says so, not
	// that the workflow took the message.
	f.SendFunc = func(context.Context, runtime.SendRequest) (runtime.SendResult, error) {
		return runtime.SendResult{MessageID: 5, Status: runtime.SendEnqueued, Duplicate: true, WorkflowStatus: "completed"}, nil
	}
	rivetctl(t, addr, "send", "orders", "main", "incoming", "1", "--idempotency-key", "order-17", "--wait").
		wantErr(t, 1, "rivetctl: a duplicate: message 5 was sent before with this idempotency key (by an earlier send, or by this one's first attempt if a broken connection cut it off and the client sent it again), and the actor's workflow has completed: nothing takes it unless the workflow runs again from an entry before its end (rivetctl workflow retry --from ENTRY; a retry without --from replays it to the same end); nothing more was queued")
}

func TestStateInspectCreateDestroy(t *testing.T) {
	addr := servertest.Start(t, servertest.NewFake(), servertest.Config{})
	rivetctl(t, addr, "create", "counter", "main", "--input", `{"start":1}`).
		want(t, 0, "created counter main (partition 12, owner node-1)\n")
	rivetctl(t, addr, "create", "counter", "main").
		wantErr(t, 1, `rivetctl: already exists: actor counter ["main"] already exists (ALREADY_EXISTS actor.duplicate_key)`)
	rivetctl(t, addr, "-o", "json", "create", "counter", `["eu","x"]`).
		want(t, 0, `{"name":"counter","key":["eu","x"],"created_at":"2026-01-02T03:04:05Z","partition":3,"owner":"node-1"}`+"\n")

	rivetctl(t, addr, "call", "counter", "main", "increment", "3").want(t, 0, "3\n")
	rivetctl(t, addr, "send", "counter", "main", "jobs", "1").want(t, 0, "enqueued\n")
	rivetctl(t, addr, "state", "counter", "main").want(t, 0, "{\n  \"count\": 3\n}\n")
	rivetctl(t, addr, "state", "counter", "main", "-o", "json").want(t, 0, `{"count":3}`+"\n")
	rivetctl(t, addr, "state", "counter", "nope").
		wantErr(t, 1, `rivetctl: not found: actor counter ["nope"] does not exist (NOT_FOUND actor.not_found)`)

	rivetctl(t, addr, "inspect", "counter", "main").want(t, 0, `actor      counter main
partition  12
owner      node-1
created    2026-01-02T03:04:05Z
active     true
queues     jobs=1
state
{
  "count": 3
}
`)
	r := rivetctl(t, addr, "inspect", "counter", "main", "-o", "json")
	var in client.Inspection
	if err := json.Unmarshal([]byte(r.stdout), &in); err != nil || r.code != 0 || string(in.State) != `{"count":3}` || in.Queues[0].Depth != 1 {
		t.Errorf("inspect json: %+v %v (%+v)", in, err, r)
	}

	rivetctl(t, addr, "actors").want(t, 0, `NAME     KEY         PARTITION  OWNER   CREATED
counter  ["eu","x"]  3          node-1  2026-01-02T03:04:05Z
counter  main        12         node-1  2026-01-02T03:04:05Z
`)
	// An empty listing says so, not a header alone; JSON is an empty list.
	rivetctl(t, addr, "actors", "nothing").want(t, 0, "no actors named nothing\n")
	rivetctl(t, addr, "actors", "nothing", "-o", "json").want(t, 0, "[]\n")
	rivetctl(t, addr, "actors", "--failed").want(t, 0, "no failed workflows\n")
	rivetctl(t, addr, "actors", "counter", "--failed").want(t, 0, "no failed workflows among the actors named counter\n")
	rivetctl(t, addr, "actors", "--failed", "-o", "json").want(t, 0, "[]\n")
	r = rivetctl(t, addr, "actors", "-o", "json")
	var list []client.ActorInfo
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list) != 2 {
		t.Errorf("actors json: %v %+v", err, r)
	}

	rivetctl(t, addr, "destroy", "counter", "main").want(t, 0, "destroyed counter main\n")
	rivetctl(t, addr, "destroy", "counter", "main").
		wantErr(t, 1, `rivetctl: not found: actor counter ["main"] does not exist (NOT_FOUND actor.not_found)`)
	rivetctl(t, addr, "destroy", "counter", "main", "-o", "json").
		wantErr(t, 1, `{"error":{"code":"NOT_FOUND","reason":"actor.not_found","message":"actor counter [\"main\"] does not exist"},"exit":1}`)
	rivetctl(t, addr, "destroy", "counter", `["eu","x"]`, "-o", "json").
		want(t, 0, `{"name":"counter","key":["eu","x"],"destroyed":true}`+"\n")
}

func TestAdminCommands(t *testing.T) {
	f := servertest.NewFake()
	f.PartitionCount = 4
	f.PartitionTable = []runtime.PartitionOwner{{Partition: 0, Owner: "node-1", Token: 7}, {Partition: 2, Owner: "node-2", Token: 9}}
	addr := servertest.Start(t, f, servertest.Config{})
	rivetctl(t, addr, "members").want(t, 0, `NODE    ADDRESS         GOSSIP  STATE  PARTITIONS  STARTED               FORMAT  BUILD
node-1  127.0.0.1:6420  -       alive  16          2026-01-02T03:04:05Z  4       (devel) 4cea5441f3c2+dirty
storage formats recorded: 2, 3, 4; a build of storage format 3 or older must not run in this cluster: it refuses to start, or, if it predates the record, starts and misreads the data (docs/deploy.md, "Downgrades")
`)
	rivetctl(t, addr, "members", "-o", "json").
		want(t, 0, `[{"node_id":"node-1","grpc_addr":"127.0.0.1:6420","state":"alive","partitions_owned":16,"started_at":"2026-01-02T03:04:05Z","build":"rivet (devel) 4cea5441f3c2+dirty 2026-12-05T18:57:56Z go1.26.8","storage_format":4}]`+"\n")
	rivetctl(t, addr, "partitions").want(t, 0, `4 partitions, 2 with an owner, 2 owners
PARTITION  OWNER   TOKEN
0          node-1  7
2          node-2  9
`)
	one := servertest.NewFake()
	one.PartitionCount = 2
	one.PartitionTable = []runtime.PartitionOwner{{Partition: 0, Owner: "node-1", Token: 7}, {Partition: 1, Owner: "node-1", Token: 8}}
	rivetctl(t, servertest.Start(t, one, servertest.Config{}), "partitions").want(t, 0, `2 partitions, 2 with an owner, 1 owner
PARTITION  OWNER   TOKEN
0          node-1  7
1          node-1  8
`)
	rivetctl(t, addr, "partitions", "-o", "json").
		want(t, 0, `{"partition_count":4,"partitions":[{"partition":0,"owner":"node-1","token":7},{"partition":2,"owner":"node-2","token":9}]}`+"\n")
	rivetctl(t, addr, "stats").want(t, 0, `node              node-1
active actors     1
calls             2
commits           3
commit batches    1
partitions owned  16
`)
}

func TestAddrFromEnv(t *testing.T) {
	addr := servertest.Start(t, servertest.NewFake(), servertest.Config{})
	rivetctlEnv(t, map[string]string{client.EndpointEnv: addr}, "call", "counter", "main", "increment", "1").want(t, 0, "1\n")
}

func TestTimeout(t *testing.T) {
	f := servertest.NewFake()
	f.CallFunc = func(ctx context.Context, _ runtime.CallRequest) (json.RawMessage, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	addr := servertest.Start(t, f, servertest.Config{})
	rivetctl(t, addr, "call", "slow", "k", "wait", "--timeout", "100ms").
		wantErr(t, 1, "rivetctl: deadline exceeded: no answer from "+addr+" within 100ms (--timeout) (DEADLINE_EXCEEDED)"+
			"; it may have run all the same: look (rivetctl state, inspect) before running it again, which could apply it twice")
}

// stuckDrain is a node whose drain never finishes: it keeps its 16
// partitions (the fake's member list says so).
type stuckDrain struct{ *servertest.Fake }

func (stuckDrain) Drain(context.Context, string, bool) (uint32, error) { return 16, nil }

// A drain that outlasts --wait says how many partitions are left and that
// the node stays draining, not that the node did not answer.
func TestDrainThatOutlastsItsWaitSaysWhatIsLeft(t *testing.T) {
	addr := servertest.Start(t, stuckDrain{servertest.NewFake()}, servertest.Config{})
	r := rivetctl(t, addr, "drain", "node-1", "--wait", "300ms")
	if r.code == 0 || !strings.Contains(r.stderr, "still own") || !strings.Contains(r.stderr, "of its 16 partitions") || strings.Contains(r.stderr, "no answer") {
		t.Fatalf("exit %d, stderr %q; want a failure saying node-1 still owns its partitions", r.code, r.stderr)
	}
	// With --output json: no progress bar, one JSON error.
	rivetctl(t, addr, "-o", "json", "drain", "node-1", "--wait", "300ms").
		wantErrPrefix(t, 1, `{"error":{"code":"DEADLINE_EXCEEDED","message":"node-1 still owns 16 of its 16 partitions after 300ms`)
}

// lastNode is the only node that could take partitions.
type lastNode struct{ *servertest.Fake }

func (lastNode) Drain(_ context.Context, node string, _ bool) (uint32, error) {
	return 0, rivet.Reasonf(rivet.ErrFailedPrecondition, "node", "last_eligible", "cannot drain node %s: no other node can take its partitions", node)
}

// A drain the cluster's state refuses says so in gRPC's words, and fails
// as a node's refusal does (exit 1), not as a mistake on the command line.
func TestADrainOfTheLastNodeIsAFailedPrecondition(t *testing.T) {
	addr := servertest.Start(t, lastNode{servertest.NewFake()}, servertest.Config{})
	rivetctl(t, addr, "drain", "node-1").
		wantErr(t, 1, "rivetctl: failed precondition: cannot drain node node-1: no other node can take its partitions (FAILED_PRECONDITION node.last_eligible)")
	rivetctl(t, addr, "-o", "json", "drain", "node-1").
		wantErr(t, 1, `{"error":{"code":"FAILED_PRECONDITION","reason":"node.last_eligible","message":"cannot drain node node-1: no other node can take its partitions"},"exit":1}`)
}

// A node that dies during its drain is not "drained": its partitions move
// by failover once its lease runs out (a cluster trial killed a node
// mid-drain and read "drained node3: 253 partitions moved"). One stopped
// gracefully (left) gave its partitions up as it stopped: drained.
func TestADrainOfANodeThatDiesSaysSo(t *testing.T) {
	for _, tc := range []struct {
		name    string
		members []runtime.Member
		want    string
	}{
		{"dead", []runtime.Member{{NodeID: "node-1", State: "dead"}, {NodeID: "node-2", State: "alive", PartitionsOwned: 16}}, "node-1 looks dead to the node answering: it stopped answering during the drain"},
		{"gone", []runtime.Member{{NodeID: "node-2", State: "alive", PartitionsOwned: 16}}, "node-1 is no longer a member: it stopped during the drain"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := servertest.NewFake()
			f.MembersFunc = func(context.Context) ([]runtime.Member, error) { return tc.members, nil }
			addr := servertest.Start(t, stuckDrain{f}, servertest.Config{})
			rivetctl(t, addr, "-o", "json", "drain", "node-1").wantErrPrefix(t, 1, `{"error":{"code":"UNAVAILABLE","message":"`+tc.want)
		})
	}
	f := servertest.NewFake()
	f.MembersFunc = func(context.Context) ([]runtime.Member, error) {
		return []runtime.Member{{NodeID: "node-1", State: "left"}, {NodeID: "node-2", State: "alive", PartitionsOwned: 16}}, nil
	}
	addr := servertest.Start(t, stuckDrain{f}, servertest.Config{})
	if r := rivetctl(t, addr, "-o", "json", "drain", "node-1"); r.code != 0 || !strings.Contains(r.stdout, `"drained":true`) {
		t.Errorf("a node that left with its partitions given up: exit %d, stdout %s, stderr %s; want drained", r.code, r.stdout, r.stderr)
	}
}

type growingDrain struct{ *servertest.Fake }

// Drain answers 10: the node still takes partitions back (an undo just
// before), and the member list says 16.
func (growingDrain) Drain(context.Context, string, bool) (uint32, error) { return 10, nil }

// A node that owns more partitions during its drain than when it began
// (it was taking partitions back) is counted with them: never "16 of its
// 10".
func TestDrainOfANodeStillTakingPartitionsCountsThem(t *testing.T) {
	addr := servertest.Start(t, growingDrain{servertest.NewFake()}, servertest.Config{})
	rivetctl(t, addr, "-o", "json", "drain", "node-1", "--wait", "300ms").
		wantErrPrefix(t, 1, `{"error":{"code":"DEADLINE_EXCEEDED","message":"node-1 still owns 16 of its 16 partitions after 300ms`)
}

// inspect lists an actor's scheduled calls, earliest first, and -o json
// carries them.
func TestInspectShowsScheduledCalls(t *testing.T) {
	f := servertest.NewFake()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	f.InspectFunc = func(_ context.Context, ref runtime.Ref) (runtime.Inspection, error) {
		return runtime.Inspection{
			Info:  runtime.ActorInfo{Ref: ref, CreatedAt: at, Partition: 7, Owner: "node-1"},
			State: json.RawMessage(`{}`),
			Schedules: []rivet.ScheduledCall{
				{ID: "a1", Action: "expire", Args: json.RawMessage(`[]`), At: at.Add(time.Minute), CreatedAt: at},
				{ID: "every:beat", Action: "add", Args: json.RawMessage(`[1]`), At: at.Add(time.Hour), CreatedAt: at, Name: "beat", Every: time.Hour, LastRun: at},
				{ID: "every:daily", Action: "report", Args: json.RawMessage(`[]`), At: at.Add(24 * time.Hour), CreatedAt: at, Name: "daily", Cron: "CRON_TZ=Europe/Paris 0 9 * * *",
					LastRun: at.Add(-24 * time.Hour), LastError: "mail server down\nretry later"},
			},
		}, nil
	}
	addr := servertest.Start(t, f, servertest.Config{})
	rivetctl(t, addr, "inspect", "sessionActor", "s").want(t, 0, `actor      sessionActor s
partition  7
owner      node-1
created    2026-01-02T03:04:05Z
active     false
scheduled  2026-01-02T03:05:05Z  expire []  (a1)
           2026-01-02T04:04:05Z  add [1]  (every:beat)  every 1h0m0s  last run 2026-01-02T03:04:05Z ok
           2026-01-03T03:04:05Z  report []  (every:daily)  cron CRON_TZ=Europe/Paris 0 9 * * *  last run 2026-01-01T03:04:05Z failed: mail server down retry later
state
{}
`)
	rivetctl(t, addr, "schedule", "list", "sessionActor", "s").want(t, 0, `ID           AT                    ACTION  ARGS  EVERY                           LAST RUN
a1           2026-01-02T03:05:05Z  expire  []    -                               -
every:beat   2026-01-02T04:04:05Z  add     [1]   1h0m0s                          2026-01-02T03:04:05Z ok
every:daily  2026-01-03T03:04:05Z  report  []    CRON_TZ=Europe/Paris 0 9 * * *  2026-01-01T03:04:05Z failed: mail server down retry later
`)
	r := rivetctl(t, addr, "inspect", "sessionActor", "s", "-o", "json")
	var in client.Inspection
	if err := json.Unmarshal([]byte(r.stdout), &in); err != nil || len(in.Schedules) != 3 || in.Schedules[1].ID != "every:beat" || in.Schedules[1].Every != time.Hour ||
		in.Schedules[2].Cron != "CRON_TZ=Europe/Paris 0 9 * * *" ||
		string(in.Schedules[1].Args) != "[1]" || !in.Schedules[0].At.Equal(at.Add(time.Minute)) {
		t.Errorf("inspect json: %+v %v (%+v)", in.Schedules, err, r)
	}
}

// schedule cancel removes a call by its id and says when there was none.
func TestScheduleCancel(t *testing.T) {
	f := servertest.NewFake()
	var got []string
	f.CancelScheduledCallFunc = func(ref runtime.Ref, id string) (bool, error) {
		got = append(got, ref.Name+" "+strings.Join(ref.Key, ",")+" "+id)
		return id == "every:beat", nil
	}
	addr := servertest.Start(t, f, servertest.Config{})
	rivetctl(t, addr, "schedule", "cancel", "reportActor", "main", "every:beat").want(t, 0, "cancelled every:beat\n")
	rivetctl(t, addr, "schedule", "cancel", "reportActor", "main", "x1").want(t, 0, "no pending call x1 (it ran, or was cancelled)\n")
	rivetctl(t, addr, "-o", "json", "schedule", "cancel", "reportActor", "main", "every:beat").want(t, 0, `{"cancelled":true}`+"\n")
	rivetctl(t, addr, "schedule", "cancel", "reportActor", "main").
		wantErr(t, 2, "rivetctl: usage: rivetctl schedule cancel ACTOR KEY ID [flags] (got 2 arguments)")
	if want := "reportActor main every:beat|reportActor main x1|reportActor main every:beat"; strings.Join(got, "|") != want {
		t.Errorf("cancels sent: %q, want %q", strings.Join(got, "|"), want)
	}
}

// inspect shows the first ten scheduled calls and says how many more.
func TestInspectCutsALongListOfScheduledCalls(t *testing.T) {
	f := servertest.NewFake()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	f.InspectFunc = func(_ context.Context, ref runtime.Ref) (runtime.Inspection, error) {
		in := runtime.Inspection{Info: runtime.ActorInfo{Ref: ref, CreatedAt: at}, State: json.RawMessage(`{}`)}
		for i := range 12 {
			in.Schedules = append(in.Schedules, rivet.ScheduledCall{ID: fmt.Sprintf("c%d", i), Action: "add", Args: json.RawMessage(`[]`), At: at})
		}
		return in, nil
	}
	addr := servertest.Start(t, f, servertest.Config{})
	r := rivetctl(t, addr, "inspect", "a", "k")
	if r.code != 0 || strings.Count(r.stdout, "  add []  (c") != 10 || !strings.Contains(r.stdout, "... and 2 more (rivetctl schedule list shows all)") {
		t.Errorf("inspect of 12 calls:\n%s", r.stdout)
	}
	if r := rivetctl(t, addr, "schedule", "list", "a", "k"); strings.Count(r.stdout, " add ") != 12 {
		t.Errorf("schedule list of 12 calls:\n%s", r.stdout)
	}
}

// watch prints events as they come, a gap where the stream was made again,
// and stops after --count.
func TestWatch(t *testing.T) {
	t.Parallel()
	f := servertest.NewFake()
	var mu sync.Mutex
	var subs []string
	f.SubscribeFunc = func(_ context.Context, ref runtime.Ref, events []string) (server.EventStream, error) {
		mu.Lock()
		defer mu.Unlock()
		subs = append(subs, ref.Name+" "+strings.Join(ref.Key, ",")+" "+strings.Join(events, ","))
		if len(subs)%2 == 1 {
			// The actor moves after its first event.
			return servertest.NewEvents(rivet.Errorf(rivet.ErrUnavailable, "the actor's partition left node n1"),
				rivet.Event{Name: "newCount", Data: json.RawMessage(`1`)}), nil
		}
		return servertest.NewEvents(nil, rivet.Event{Name: "newCount", Data: json.RawMessage(`{"n": 2}`)}), nil
	}
	addr := servertest.Start(t, f, servertest.Config{})
	const broke = "rivetctl: the stream broke (unavailable: the actor's partition left node n1 (UNAVAILABLE actor.unavailable)); subscribing again\n"
	const gap = "-- gap: subscribed again (the actor moved or its node stopped); events may be missing\n"
	check := func(r result, code int, stdout, stderr string) {
		t.Helper()
		if r.code != code || r.stdout != stdout || r.stderr != stderr {
			t.Errorf("exit %d, stdout:\n%s\nstderr:\n%s\nwant exit %d, stdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr, code, stdout, stderr)
		}
	}
	check(rivetctl(t, addr, "watch", "counter", "main", "newCount", "--count", "2"), 0,
		"newCount 1\n"+gap+"newCount {\"n\":2}\n", broke)
	// With --output json, stderr holds JSON objects only.
	check(rivetctl(t, addr, "-o", "json", "watch", "counter", "main", "--count", "2"), 0,
		`{"name":"newCount","data":1}`+"\n"+`{"gap":true}`+"\n"+`{"name":"newCount","data":{"n":2}}`+"\n",
		`{"note":"the stream broke (unavailable: the actor's partition left node n1 (UNAVAILABLE actor.unavailable)); subscribing again"}`+"\n")
	// --for ends a watch that has heard all there is; short of --count,
	// it is a failure.
	check(rivetctl(t, addr, "watch", "counter", "main", "--for", "2s"), 0, "newCount 1\n"+gap+"newCount {\"n\":2}\n", broke)
	check(rivetctl(t, addr, "watch", "counter", "main", "--for", "2s", "--count", "3"), 1, "newCount 1\n"+gap+"newCount {\"n\":2}\n",
		broke+"rivetctl: 2 of --count 3 events within --for 2s\n")
	if want := "counter main newCount|counter main newCount|counter main |counter main |counter main |counter main |counter main |counter main "; strings.Join(subs, "|") != want {
		t.Errorf("subscriptions: %q, want %q", strings.Join(subs, "|"), want)
	}

	// A stream that breaks and cannot be made again before --for ends.
	var tries atomic.Int32
	f.SubscribeFunc = func(context.Context, runtime.Ref, []string) (server.EventStream, error) {
		if tries.Add(1) == 1 {
			return servertest.NewEvents(rivet.Errorf(rivet.ErrUnavailable, "the actor's partition left node n1"),
				rivet.Event{Name: "newCount", Data: json.RawMessage(`1`)}), nil
		}
		return nil, rivet.Errorf(rivet.ErrUnavailable, "partition 3 is not owned by node n1")
	}
	check(rivetctl(t, addr, "watch", "counter", "main", "--for", "1s"), 1, "newCount 1\n",
		broke+"rivetctl: --for ended while the stream was down (subscribing again): events may be missing\n")

	f.SubscribeFunc = nil
	rivetctl(t, addr, "watch", "counter", "main", "nope").
		wantErr(t, 1, `rivetctl: not found: actor counter has no events (NOT_FOUND event.unknown_event)`)
	rivetctl(t, addr, "watch", "counter").
		wantErr(t, 2, "rivetctl: usage: rivetctl watch ACTOR KEY [EVENT...] [flags] (got 1 argument)")
}

// A last run's error is one line, cut on a character.
func TestLastOutcome(t *testing.T) {
	if got := lastOutcome(""); got != "ok" {
		t.Fatalf("no error: %q", got)
	}
	if got := lastOutcome("down\n\tfor now"); got != "failed: down for now" {
		t.Fatalf("two lines: %q", got)
	}
	long := strings.Repeat("x", 76) + strings.Repeat("ш", 20)
	got := lastOutcome(long)
	if !utf8.ValidString(got) || !strings.HasSuffix(got, "...") || len(got) > len("failed: ")+80 {
		t.Fatalf("long: %q (%d bytes)", got, len(got))
	}
}

// A mistyped subcommand of a command group is a usage error (exit 2), not
// the group's help with exit 0: a script that runs `workflow retyr` must
// not take it for a retry that worked. The group alone still shows its help.
func TestAnUnknownSubcommandOfAGroupIsAUsageError(t *testing.T) {
	f := servertest.NewFake()
	addr := servertest.Start(t, f, servertest.Config{})
	rivetctl(t, addr, "workflow", "retyr", "charger", "main").
		wantErr(t, 2, `rivetctl: unknown command "retyr" for "rivetctl workflow" (did you mean retry? see rivetctl workflow --help)`)
	rivetctl(t, addr, "schedule", "lst", "sessionActor", "alice").
		wantErr(t, 2, `rivetctl: unknown command "lst" for "rivetctl schedule" (did you mean list? see rivetctl schedule --help)`)
	rivetctl(t, addr, "-o", "json", "schedule", "remove", "a", "k", "id").
		wantErr(t, 2, `{"error":{"code":"USAGE","message":"unknown command \"remove\" for \"rivetctl schedule\" (see rivetctl schedule --help)"},"exit":2}`)
	if r := rivetctl(t, addr, "workflow"); r.code != 0 || !strings.Contains(r.stdout, "Available Commands:") {
		t.Errorf("workflow alone: exit %d, stdout %q; want its help, exit 0", r.code, r.stdout)
	}
}

// A key printed by actors can be pasted back as KEY: one that starts with
// '-' is printed as a JSON array, which the command line does not take for
// a flag.
func TestAKeyThatLooksLikeAFlagIsPrintedAsAnArray(t *testing.T) {
	addr := servertest.Start(t, servertest.NewFake(), servertest.Config{})
	rivetctl(t, addr, "call", "counter", `["-x"]`, "increment", "1").want(t, 0, "1\n")
	r := rivetctl(t, addr, "actors", "counter")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.code != 0 || len(lines) != 2 {
		t.Fatalf("actors: %+v", r)
	}
	key := strings.Fields(lines[1])[1]
	if key != `["-x"]` {
		t.Errorf("actors printed the key as %s, want [\"-x\"]", key)
	}
	rivetctl(t, addr, "call", "counter", key, "getCount").want(t, 0, "1\n")
}

// A command with side effects that failed after it may have run says so:
// run again, it could apply twice (an increment counted twice). A read, or
// a request that never reached a node, says nothing of the kind.
func TestACommandThatMayHaveRunSaysSo(t *testing.T) {
	t.Parallel()
	f := servertest.NewFake()
	f.CallFunc = func(ctx context.Context, req runtime.CallRequest) (json.RawMessage, error) {
		if req.Action == "wait" {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		// What a node answers when the owner it forwarded to died mid-call.
		return nil, &rivet.Error{Kind: rivet.ErrUnavailable, Message: "the stream to the actor's owner at 127.0.0.1:6430 broke during the forwarded call"}
	}
	f.InspectFunc = func(context.Context, runtime.Ref) (runtime.Inspection, error) {
		return runtime.Inspection{}, &rivet.Error{Kind: rivet.ErrUnavailable, Message: "the stream to the actor's owner at 127.0.0.1:6430 broke during the forwarded call"}
	}
	addr := servertest.Start(t, f, servertest.Config{})
	const mayHaveRun = "; it may have run all the same: look (rivetctl state, inspect) before running it again, which could apply it twice"
	rivetctl(t, addr, "call", "counter", "main", "increment", "1").
		wantErr(t, 1, "rivetctl: unavailable: the stream to the actor's owner at 127.0.0.1:6430 broke during the forwarded call (UNAVAILABLE)"+mayHaveRun)
	rivetctl(t, addr, "-o", "json", "call", "counter", "main", "increment", "1").
		wantErr(t, 1, `{"error":{"code":"UNAVAILABLE","message":"the stream to the actor's owner at 127.0.0.1:6430 broke during the forwarded call","hint":"`+strings.TrimPrefix(mayHaveRun, "; ")+`"},"exit":1}`)
	rivetctl(t, addr, "call", "slow", "k", "wait", "--timeout", "100ms").
		wantErr(t, 1, "rivetctl: deadline exceeded: no answer from "+addr+" within 100ms (--timeout) (DEADLINE_EXCEEDED)"+mayHaveRun)
	// A send's unknown outcome is a message that may be queued: inspect
	// shows it, and a key would have made sending it again safe.
	f.SendFunc = func(context.Context, runtime.SendRequest) (runtime.SendResult, error) {
		return runtime.SendResult{}, &rivet.Error{Kind: rivet.ErrUnavailable, Message: "the stream to the actor's owner at 127.0.0.1:6430 broke during the forwarded call"}
	}
	rivetctl(t, addr, "send", "orders", "main", "incoming", "1").
		wantErr(t, 1, "rivetctl: unavailable: the stream to the actor's owner at 127.0.0.1:6430 broke during the forwarded call (UNAVAILABLE)"+
			"; it may have been queued all the same: look (rivetctl inspect: its queues, and what its workflow took) before sending it again, which could queue it twice (--idempotency-key queues a send at most once)")
	// A read-only call ran a read-only action, or nothing.
	rivetctl(t, addr, "call", "--read-only", "slow", "k", "wait", "--timeout", "100ms").
		wantErr(t, 1, "rivetctl: deadline exceeded: no answer from "+addr+" within 100ms (--timeout) (DEADLINE_EXCEEDED)")
	// A read is safe to run again. The client retries it until the
	// deadline, which under load may end an attempt in flight (the
	// error is then the deadline's): either way, no note.
	r := rivetctl(t, addr, "state", "counter", "main", "--timeout", "300ms")
	if r.code != 1 || (r.stderr != "rivetctl: unavailable: the stream to the actor's owner at 127.0.0.1:6430 broke during the forwarded call (UNAVAILABLE)\n" &&
		r.stderr != "rivetctl: deadline exceeded: no answer from "+addr+" within 300ms (--timeout) (DEADLINE_EXCEEDED)\n") {
		t.Errorf("a read: exit %d, stderr %q; want exit 1, UNAVAILABLE (or the deadline) without a note", r.code, r.stderr)
	}
	// A node that is not there ran nothing.
	r = rivetctl(t, "127.0.0.1:1", "--timeout", "300ms", "call", "counter", "main", "increment", "1")
	if r.code != 1 || strings.Contains(r.stderr, "may have run") {
		t.Errorf("exit %d, stderr %q; want exit 1 without 'may have run'", r.code, r.stderr)
	}
	// Nor did a port that closes connections before gRPC's server preface
	// (a TLS-only node dialed in plaintext does so, and a port that is not
	// gRPC): the connection never became ready, so the call was never
	// sent. This one answers no TLS either: it is no gRPC port.
	closer, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	go func() {
		for {
			conn, err := closer.Accept()
			if err != nil {
				return
			}
			conn.Close()
		}
	}()
	r = rivetctl(t, closer.Addr().String(), "--timeout", "5s", "call", "counter", "main", "increment", "1")
	// Which of the client's read or write the close fails first is a race.
	if r.code != 1 || !strings.Contains(r.stderr, closer.Addr().String()+" does not answer gRPC") || strings.Contains(r.stderr, "may have run") {
		t.Errorf("a port that closes at once: exit %d, stderr %q; want exit 1, the hint that it does not answer gRPC, without 'may have run'", r.code, r.stderr)
	}
}

// A watch whose subscribing outlasts --timeout says so with --timeout's
// value, which alone bounds the subscribing: not the command's deadline,
// which --for (or "until interrupted", a hundred years) extends.
func TestAWatchThatCannotSubscribeInTimeNamesItsTimeout(t *testing.T) {
	f := servertest.NewFake()
	f.SubscribeFunc = func(ctx context.Context, _ runtime.Ref, _ []string) (server.EventStream, error) {
		<-ctx.Done() // a node that does not answer
		return nil, ctx.Err()
	}
	addr := servertest.Start(t, f, servertest.Config{})
	for _, args := range [][]string{{"watch", "counter", "main"}, {"watch", "counter", "main", "--for", "1m"}} {
		rivetctl(t, addr, append(args, "--timeout", "300ms")...).
			wantErr(t, 1, "rivetctl: deadline exceeded: no answer from "+addr+" within 300ms (--timeout) (DEADLINE_EXCEEDED)")
	}
}

// An --addr given empty (most often an unset shell variable, --addr
// "$NODE") is refused rather than taken for the default: a destroy meant
// for one cluster must not reach the node on localhost.
func TestAnEmptyAddrIsAUsageError(t *testing.T) {
	addr := servertest.Start(t, servertest.NewFake(), servertest.Config{})
	env := map[string]string{client.EndpointEnv: addr}
	rivetctlEnv(t, env, "call", "counter", "main", "increment", "1").want(t, 0, "1\n")
	for _, args := range [][]string{
		{"--addr", "", "destroy", "counter", "main"},
		{"--addr=", "destroy", "counter", "main"},
		{"--addr", " ", "destroy", "counter", "main"},
	} {
		rivetctlEnv(t, env, args...).
			wantErr(t, 2, "rivetctl: --addr is empty (leave it out for $RIVET_ENDPOINT, else localhost:6420)")
	}
	rivetctlEnv(t, env, "call", "--no-create", "counter", "main", "getCount").want(t, 0, "1\n")
}

// --wait-timeout without --wait is refused: the send did not wait, which
// whoever wrote the flag expected it to.
func TestWaitTimeoutWithoutWaitIsAUsageError(t *testing.T) {
	f := servertest.NewFake()
	var sent atomic.Int32
	f.SendFunc = func(context.Context, runtime.SendRequest) (runtime.SendResult, error) {
		sent.Add(1)
		return runtime.SendResult{MessageID: 1, Status: runtime.SendEnqueued}, nil
	}
	addr := servertest.Start(t, f, servertest.Config{})
	rivetctl(t, addr, "send", "--wait-timeout", "5s", "mailbox", "alice", "inbox", "{}").
		wantErr(t, 2, "rivetctl: --wait-timeout needs --wait (without it, send returns once the message is queued)")
	if n := sent.Load(); n != 0 {
		t.Errorf("%d messages sent, want none", n)
	}
	rivetctl(t, addr, "send", "mailbox", "alice", "inbox", "{}").want(t, 0, "enqueued\n")
}

// drain --undo does not wait (nothing tells when a node has its share
// back), so a --wait with it is refused before anything is sent, rather
// than ignored by a command that returns at once; but --wait 0, the
// documented "do not wait", is what an undo does, and is accepted (a
// user trial: a script passing --wait 0 to both was refused).
func TestDrainUndoWithWaitIsAUsageError(t *testing.T) {
	f := &countingDrain{Fake: servertest.NewFake()}
	addr := servertest.Start(t, f, servertest.Config{})
	for _, wait := range []string{"1m", "1ns"} {
		rivetctl(t, addr, "drain", "node-1", "--undo", "--wait", wait).
			wantErr(t, 2, "rivetctl: --wait makes no sense with --undo (an undo returns once node-1 is no longer draining; rivetctl members shows its partitions come back)")
	}
	if n := f.drains.Load(); n != 0 {
		t.Errorf("%d drain requests sent, want none", n)
	}
	const undone = "node-1 is no longer draining (it owns 16 partitions now; its share comes back as the cluster rebalances: rivetctl members shows it)\n"
	rivetctl(t, addr, "drain", "node-1", "--undo").want(t, 0, undone)
	for _, wait := range []string{"0", "0s"} {
		rivetctl(t, addr, "drain", "node-1", "--undo", "--wait", wait).want(t, 0, undone)
	}
	if n := f.drains.Load(); n != 3 {
		t.Errorf("%d drain requests sent, want 3 (the undos)", n)
	}
}

// A negative --wait is refused before anything is sent: it used to drain
// the node, then fail at once saying it still owned its partitions.
func TestDrainWithANegativeWaitIsAUsageError(t *testing.T) {
	f := &countingDrain{Fake: servertest.NewFake()}
	addr := servertest.Start(t, f, servertest.Config{})
	rivetctl(t, addr, "drain", "node-1", "--wait", "-1s").
		wantErr(t, 2, "rivetctl: --wait must not be negative, not -1s (0: do not wait)")
	if n := f.drains.Load(); n != 0 {
		t.Errorf("%d drain requests sent, want none", n)
	}
}

// countingDrain counts the drain requests it answers, for a node that
// owns 16 partitions.
type countingDrain struct {
	*servertest.Fake
	drains atomic.Int32
}

func (c *countingDrain) Drain(context.Context, string, bool) (uint32, error) {
	c.drains.Add(1)
	return 16, nil
}

// Mistakes on the command line exit 2, as the other usage errors do: an
// address without a port, a TLS file that cannot be read, an unknown shell
// for completion or topic for help (which cobra answers with help, exit 0).
func TestCommandLineMistakesExit2(t *testing.T) {
	addr := servertest.Start(t, servertest.NewFake(), servertest.Config{})
	missing := filepath.Join(t.TempDir(), "missing.pem")
	for _, c := range []struct {
		args   []string
		prefix string
	}{
		{[]string{"--addr", "127.0.0.1", "members"}, `rivetctl: rivet client: node address "127.0.0.1" has no port`},
		{[]string{"--addr", addr, "--tls-ca", missing, "members"}, "rivetctl: rivet client: "},
		{[]string{"--addr", addr, "--tls-cert", missing, "--tls-key", missing, "members"}, "rivetctl: rivet client: "},
		{[]string{"completion", "bogus"}, `rivetctl: unknown command "bogus" for "rivetctl completion" (see rivetctl completion --help)`},
		{[]string{"help", "bogus"}, `rivetctl: unknown help topic "bogus"`},
		{[]string{"help", "workflow", "bogus"}, `rivetctl: unknown help topic "workflow bogus"`},
	} {
		rivetctlEnv(t, map[string]string{}, c.args...).wantErrPrefix(t, 2, c.prefix)
	}
	// What works still does.
	for _, args := range [][]string{{"completion", "bash"}, {"help", "drain"}, {"help"}, {"completion"}} {
		if r := rivetctlEnv(t, map[string]string{}, args...); r.code != 0 || r.stdout == "" {
			t.Errorf("%v: exit %d, stdout %d bytes, stderr %q", args, r.code, len(r.stdout), r.stderr)
		}
	}
}

// A drain whose stderr is no terminal (a log, a pipe) writes a few plain
// lines there, not the bar's frames, which redraw the line with \r.
func TestDrainToALogWritesPlainLines(t *testing.T) {
	t.Parallel()
	f := &countingDrain{Fake: servertest.NewFake()}
	var looks atomic.Int32
	f.MembersFunc = func(context.Context) ([]runtime.Member, error) {
		// 16 partitions for a few looks (frames enough to redraw), then none.
		owned := uint32(16)
		if looks.Add(1) > 6 {
			owned = 0
		}
		return []runtime.Member{{NodeID: "node-1", GRPCAddr: "127.0.0.1:6420", State: "alive", PartitionsOwned: owned}}, nil
	}
	addr := servertest.Start(t, f, servertest.Config{})
	r := rivetctl(t, addr, "drain", "node-1", "--wait", "1m")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "drained node-1: 16 partitions moved in ") {
		t.Fatalf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if r.stderr != "draining node-1: 16 partitions to move\n" {
		t.Errorf("stderr %q; want one plain line", r.stderr)
	}
	// One that moves: a line when fewer are left (at most one per
	// plainEvery, every look here).
	defer func(d time.Duration) { plainEvery = d }(plainEvery)
	plainEvery = 0
	looks.Store(0)
	f.MembersFunc = func(context.Context) ([]runtime.Member, error) {
		owned := []uint32{16, 16, 8, 8, 8, 0}[min(int(looks.Add(1))-1, 5)]
		return []runtime.Member{{NodeID: "node-1", GRPCAddr: "127.0.0.1:6420", State: "alive", PartitionsOwned: owned}}, nil
	}
	r = rivetctl(t, addr, "drain", "node-1", "--wait", "1m")
	if want := "draining node-1: 16 partitions to move\ndraining node-1: 8 of 16 partitions left\n"; r.code != 0 || r.stderr != want {
		t.Errorf("exit %d, stderr %q; want %q", r.code, r.stderr, want)
	}
	// A drain that outlasts --wait: the same line, then the error.
	r = rivetctl(t, servertest.Start(t, stuckDrain{servertest.NewFake()}, servertest.Config{}), "drain", "node-1", "--wait", "700ms")
	if want := "draining node-1: 16 partitions to move\nrivetctl: node-1 still owns 16 of its 16 partitions after 700ms"; r.code != 1 || !strings.HasPrefix(r.stderr, want) || strings.ContainsAny(r.stderr, "\r\x1b") {
		t.Errorf("exit %d, stderr %q; want it to start %q, with no \\r", r.code, r.stderr, want)
	}
}

// A wait the node cut short answers "enqueued" (runtime: the actor moved,
// or the node stops, SIGTERM): the message is queued and its completion
// was not waited for. The node does not say which, so neither does the
// error: not "the actor moved" for a node that was stopped.
func TestASendWaitCutShortSaysWhatIsKnown(t *testing.T) {
	f := servertest.NewFake()
	f.SendFunc = func(context.Context, runtime.SendRequest) (runtime.SendResult, error) {
		return runtime.SendResult{MessageID: 5, Status: runtime.SendEnqueued}, nil
	}
	addr := servertest.Start(t, f, servertest.Config{})
	const line = "enqueued, not waited for: the node stopped waiting before the workflow completed message 5 (the actor moved to another node, or its node is stopping); the message stays queued and its workflow takes it where it runs next: do not send it again"
	rivetctl(t, addr, "send", "mailbox", "alice", "inbox", "1", "--wait").
		wantErr(t, 1, "rivetctl: "+line)
	r := rivetctl(t, addr, "-o", "json", "send", "mailbox", "alice", "inbox", "1", "--wait")
	if r.code != 1 || r.stdout != `{"message_id":5,"status":"enqueued"}`+"\n" || !strings.Contains(r.stderr, `"code":"UNAVAILABLE"`) || !strings.Contains(r.stderr, line) {
		t.Errorf("json: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	// With an idempotency key, sending it again is how to wait for its
	// completion (it queues nothing): not "do not send it again".
	rivetctl(t, addr, "send", "mailbox", "alice", "inbox", "1", "--wait", "--idempotency-key", "k1").
		wantErr(t, 1, "rivetctl: enqueued, not waited for: the node stopped waiting before the workflow completed message 5 (the actor moved to another node, or its node is stopping); the message stays queued and its workflow takes it where it runs next: send it again with the same --idempotency-key to wait for its completion (it is not queued twice)")
}

// A long --timeout (or --wait-timeout, --for, drain's --wait) is added to
// what a command waits by design: the sum past time.Duration's range
// wrapped to a negative deadline, so that watch with --timeout 2000000h
// failed at once, "no answer ... within -2248095h".
func TestALongTimeoutDoesNotWrapToADeadlinePast(t *testing.T) {
	f := servertest.NewFake()
	f.SubscribeFunc = func(context.Context, runtime.Ref, []string) (server.EventStream, error) {
		return servertest.NewEvents(nil, rivet.Event{Name: "newCount", Data: json.RawMessage(`1`)}), nil
	}
	addr := servertest.Start(t, f, servertest.Config{})
	rivetctl(t, addr, "watch", "counter", "main", "--count", "1", "--timeout", "2000000h").want(t, 0, "newCount 1\n")
	rivetctl(t, addr, "watch", "counter", "main", "--count", "1", "--for", "2562047h", "--timeout", "1h").want(t, 0, "newCount 1\n")
	rivetctl(t, addr, "send", "counter", "main", "q", "1", "--wait", "--wait-timeout", "2562047h", "--timeout", "1h").want(t, 0, "completed (message 1)\n1\n")
}

// A negative number as a JSON argument (increment -5) reads as a flag to
// the command line's parser, which said only "unknown shorthand flag: '5'
// in -5": the error says to put -- before it, which works.
func TestANegativeNumberArgumentSaysHowToPassIt(t *testing.T) {
	addr := servertest.Start(t, servertest.NewFake(), servertest.Config{})
	rivetctl(t, addr, "call", "counter", "main", "increment", "-5").
		wantErr(t, 2, "rivetctl: -5 reads as a flag: put -- before a negative number (rivetctl call ... -- -5)")
	rivetctl(t, addr, "send", "counter", "main", "q", "-1.5e3").
		wantErr(t, 2, "rivetctl: -1.5e3 reads as a flag: put -- before a negative number (rivetctl send ... -- -1.5e3)")
	rivetctl(t, addr, "call", "counter", "main", "increment", "--", "-5").want(t, 0, "-5\n")
	// A flag that is no number is still told as before.
	rivetctl(t, addr, "call", "counter", "main", "increment", "-x").
		wantErr(t, 2, "rivetctl: unknown shorthand flag: 'x' in -x (see rivetctl call --help)")
	rivetctl(t, addr, "call", "counter", "main", "increment", "-5x").
		wantErr(t, 2, "rivetctl: unknown shorthand flag: '5' in -5x (see rivetctl call --help)")
}

// A JSON file that starts with a UTF-8 byte order mark (as Windows
// PowerShell's Out-File and Notepad write them) is read without it: it
// was refused, with the advice to quote the whole value as a string.
func TestAJSONFileWithAByteOrderMarkIsRead(t *testing.T) {
	addr := servertest.Start(t, servertest.NewFake(), servertest.Config{})
	argFile := filepath.Join(t.TempDir(), "arg.json")
	if err := os.WriteFile(argFile, []byte("\ufeff5\r\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rivetctl(t, addr, "call", "counter", "main", "increment", "@"+argFile).want(t, 0, "5\n")
	rivetctlIn(t, "\ufeff2", map[string]string{}, "--addr", addr, "call", "counter", "main", "increment", "@-").want(t, 0, "7\n")
	// Only at the start, as a mark: anywhere else it is the text's.
	if err := os.WriteFile(argFile, []byte("5\ufeff"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := rivetctl(t, addr, "call", "counter", "main", "increment", "@"+argFile); r.code != 2 {
		t.Errorf("a value with U+FEFF after it: exit %d, stderr %q; want 2", r.code, r.stderr)
	}
	// A file of nothing but the mark is empty.
	if err := os.WriteFile(argFile, []byte("\ufeff\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rivetctl(t, addr, "call", "counter", "main", "increment", "@"+argFile).
		wantErr(t, 2, "rivetctl: argument 1: "+argFile+" is empty")
}

// A payload of one JSON value and more after it (several objects, one a
// line, as jq -c writes them) was refused with advice about quotes, which
// it had: the error says where the second value starts.
func TestAPayloadOfSeveralJSONValuesSaysSo(t *testing.T) {
	addr := servertest.Start(t, servertest.NewFake(), servertest.Config{})
	rivetctlIn(t, "{\"id\":1}\n{\"id\":2}\n", map[string]string{}, "--addr", addr, "send", "counter", "main", "q", "@-").
		wantErr(t, 2, `rivetctl: BODY_JSON (from stdin) is not valid JSON: {"id":1} {"id":2} (one JSON value, then more at byte 9: give a single value, such as an array of them)`)
	rivetctl(t, addr, "call", "counter", "main", "increment", "5 6").
		wantErr(t, 2, `rivetctl: argument 1 is not valid JSON: 5 6 (one JSON value, then more at byte 2: give a single value, such as an array of them)`)
	// Other mistakes are told as before.
	rivetctl(t, addr, "call", "counter", "main", "increment", "{a:1}").
		wantErrPrefix(t, 2, `rivetctl: argument 1 is not valid JSON: {a:1} (invalid character 'a' looking for beginning of object key string; names and strings need double quotes`)
	rivetctl(t, addr, "call", "counter", "main", "increment", "abc").
		wantErr(t, 2, `rivetctl: argument 1 is not valid JSON: abc (a string needs its quotes: '"abc"')`)
}

// A key with characters that do not print is shown as a JSON array with
// them escaped, so that what an operator sees is the key stored, and can
// be pasted back: printed as they were, an escape sequence in a key (which
// any client may name) reached the terminal, and a '\r' or a zero-width
// space showed another key.
func TestAKeyThatDoesNotPrintIsShownEscaped(t *testing.T) {
	addr := servertest.Start(t, servertest.NewFake(), servertest.Config{})
	for _, c := range []struct{ key, shown string }{
		{"\x1b[31mred", `["\u001b[31mred"]`},
		{"main\rfake", `["main\rfake"]`},
		{"zero\u200bwidth", `["zero\u200bwidth"]`},
		{"del\x7f", `["del\u007f"]`},
		{"csi\u009b2J", `["csi\u009b2J"]`},
		{"nb\u00a0sp", `["nb\u00a0sp"]`},
		{"tag\U000e0041", `["tag\udb40\udc41"]`},
		{"a<b&c", `a<b&c`},
		{"two words", `["two words"]`},
		{"ünïcødé", `ünïcødé`},
	} {
		key, err := json.Marshal([]string{c.key})
		if err != nil {
			t.Fatal(err)
		}
		if r := rivetctl(t, addr, "create", "counter", string(key)); r.code != 0 || !strings.HasPrefix(r.stdout, "created counter "+c.shown+" (partition ") {
			t.Errorf("create %q: %+v, want it shown as %s", c.key, r, c.shown)
		}
		// Pasted back, the key shown is the key.
		rivetctl(t, addr, "call", "--no-create", "counter", c.shown, "increment", "1").want(t, 0, "1\n")
	}
}

// --addr at a gRPC server that is not a rivet node (an etcd's client port,
// 2379, is the likely one: the README lists it beside the node's) says
// so, rather than leave "internal: unknown service" as the only clue.
func TestNotARivetNode(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	go srv.Serve(lis)
	defer srv.Stop()
	addr := lis.Addr().String()
	hint := "; " + addr + " serves gRPC but not rivet's API (an etcd?): --addr takes a node's gRPC address, its --grpc-addr (port 6420 by default)"
	rivetctl(t, addr, "members").
		wantErr(t, 1, "rivetctl: internal: unknown service rivet.v1.AdminService (INTERNAL)"+hint)
	rivetctl(t, addr, "call", "counter", "main", "getCount").
		wantErr(t, 1, "rivetctl: internal: unknown service rivet.v1.ActorService (INTERNAL)"+hint)
}

// call --idempotency-key runs the call once: sent again, it prints the
// first one's result and runs nothing; with other arguments the key is
// refused; with --read-only, or empty, it is a usage error.
func TestCallWithAnIdempotencyKeyRunsOnce(t *testing.T) {
	t.Parallel()
	reg, err := rivet.Setup(counter.Actor)
	if err != nil {
		t.Fatal(err)
	}
	addr := startNodeOf(t, reg)
	for range 2 {
		rivetctl(t, addr, "call", "counter", "k", "increment", "5", "--idempotency-key", "topup-1").want(t, 0, "5\n")
	}
	rivetctl(t, addr, "call", "--read-only", "counter", "k", "getCount").want(t, 0, "5\n")
	// A read of an actor that does not exist creates none (a trial's status
	// query of a mistyped order ID started its payment workflow).
	rivetctl(t, addr, "call", "--read-only", "counter", "nosuch", "getCount").
		wantErr(t, 1, `rivetctl: not found: actor counter ["nosuch"] does not exist (NOT_FOUND actor.not_found); --read-only creates no actor: give --input, or call without --read-only, to create it`)
	// --no-create said so itself: no hint.
	rivetctl(t, addr, "call", "--read-only", "--no-create", "counter", "nosuch", "getCount").
		wantErr(t, 1, `rivetctl: not found: actor counter ["nosuch"] does not exist (NOT_FOUND actor.not_found)`)
	rivetctl(t, addr, "call", "counter", "k", "increment", "6", "--idempotency-key", "topup-1").
		wantErrPrefix(t, 1, `rivetctl: invalid argument: idempotency key "topup-1" of counter ["k"] was used for another call`)
	rivetctl(t, addr, "call", "--read-only", "counter", "k", "getCount", "--idempotency-key", "x").
		wantErr(t, 2, "rivetctl: --read-only and --idempotency-key go apart: a read-only action changes nothing, and needs no key")
	rivetctl(t, addr, "call", "counter", "k", "increment", "1", "--idempotency-key", "").
		wantErr(t, 2, "rivetctl: --idempotency-key is empty")
}

// hot lists the busiest actors by key, as the node says (an on-call trial
// could not find the key of a hot actor), and asks another node through
// the one at --addr.
func TestHotListsTheBusiestActors(t *testing.T) {
	f := servertest.NewFake()
	since := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	f.Hot = []runtime.HotActor{
		{Ref: runtime.Ref{Name: "catalog", Key: []string{"sku-1"}}, Partition: 7, TurnsPerSecond: 812.5, Turns: 40210, Waited: 1500 * time.Millisecond, Since: since, Waiting: 12},
		{Ref: runtime.Ref{Name: "catalog", Key: []string{"eu", "sku-2"}}, Partition: 3, TurnsPerSecond: 3.25, Turns: 90, Since: since},
	}
	addr := servertest.Start(t, f, servertest.Config{})
	rivetctl(t, addr, "hot").want(t, 0, `ACTOR    KEY             NODE    TURNS/S  WAITING  WAITED  TURNS  SINCE
catalog  sku-1           node-1  812.5    12       1.500s  40210  2026-01-02T03:04:05Z
catalog  ["eu","sku-2"]  node-1  3.2      0        0.000s  90     2026-01-02T03:04:05Z
`)
	rivetctl(t, addr, "hot", "-n", "1", "-o", "json").want(t, 0, `[{"name":"catalog","key":["sku-1"],"node":"node-1","partition":7,"turns_per_second":812.5,"turns":40210,"waited_seconds":1.5,"since":"2026-01-02T03:04:05Z","waiting":12}]`+"\n")
	rivetctl(t, addr, "hot", "-n", "0").want(t, 2, "")
	rivetctl(t, addr, "hot", "-n", "1001").want(t, 2, "")
	// --all asks each registered node (the fake answers for node-1).
	rivetctl(t, addr, "hot", "--all", "-n", "1", "-o", "json").want(t, 0, `[{"name":"catalog","key":["sku-1"],"node":"node-1","partition":7,"turns_per_second":812.5,"turns":40210,"waited_seconds":1.5,"since":"2026-01-02T03:04:05Z","waiting":12}]`+"\n")
}
