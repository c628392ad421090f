package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/internal/buildinfo"
	"github.com/rivet-go/rivet/internal/rpcerr"
)

// Exit codes.
const (
	exitOK    = 0
	exitError = 1 // the command ran and failed
	exitUsage = 2 // the command line is wrong; nothing was sent
)

// app is one run of rivetctl: its global flags and where it writes.
type app struct {
	addr string
	// emptyAddr: an --addr was given empty (see addrsFlag).
	emptyAddr bool
	output    string
	timeout   time.Duration
	// The connection's security (see clientOptions).
	tls                    bool
	tlsCA, tlsCert, tlsKey string
	token                  string

	stdin  io.Reader // read by a JSON value given as @- (jsonArg)
	stdout io.Writer
	stderr io.Writer
	getenv func(string) string
	// stdinUsed: a value was read from stdin already; loaded, what the
	// @FILE and @- values read before the deadline began (preloadJSON).
	stdinUsed bool
	loaded    map[string]loadedValue
	// probeTLS is the package's (nil, as in tests of connectionHint
	// alone: no probe, the hints that need none).
	probeTLS func(addr string) tlsAnswer
}

// usageError is a mistake on the command line, found before anything was
// sent: exit code 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// runError is a failure of a command that ran: exit code 1. Everything
// cobra returns that is not one is a usage error (bad flag, unknown
// command, wrong number of arguments).
type runError struct {
	err error
	// code is the gRPC code's name that --output json reports for an
	// error that carries none ("": from err, or UNKNOWN).
	code string
	// note is said after the error and the connection's hint (a
	// command that may have run all the same).
	note string
}

func (e *runError) Error() string { return e.err.Error() }
func (e *runError) Unwrap() error { return e.err }

// run runs rivetctl with args (without the program name) and returns its
// exit code. Errors go to stderr as one line, so that scripts can show or
// grep them.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr, getenv: getenv, probeTLS: probeTLS}
	root := a.rootCommand()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	var re *runError
	code, hint := exitUsage, ""
	if errors.As(err, &re) {
		code, hint = exitError, a.connectionHint(err)+re.note
	} else if misplaced := misplacedFlag(root, args); misplaced != nil {
		err = misplaced
	}
	if a.output == "json" || wantsJSON(args) {
		writeJSONError(stderr, err, code, hint)
		return code
	}
	// The message is the node's, and may quote what any client sent.
	fmt.Fprintln(stderr, "rivetctl: "+printable(oneLine(describe(err))+hint))
	return code
}

// negativeNumber matches the parser's error for an argument that starts
// with '-' and a digit: a negative number, meant as a JSON argument.
var negativeNumber = regexp.MustCompile(`^unknown shorthand flag: '[0-9]' in (-[0-9]\S*)$`)

// misplacedFlag explains a command line that failed because a switch of a
// subcommand (call's --no-create, send's --wait, actors' --failed) came
// before the command's name: cobra, looking for the command, takes a flag
// it does not know for one with a value, so "--no-create call counter"
// read as the command "counter". Nil if the line has no such flag before
// its first argument.
func misplacedFlag(root *cobra.Command, args []string) error {
	global := root.PersistentFlags()
	for i := 0; i < len(args); i++ {
		arg := args[i]
		if arg == "--" || !strings.HasPrefix(arg, "-") || arg == "-" {
			return nil // the command's name, or an argument: what follows parsed
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(arg, "-"), "=")
		f := global.Lookup(name)
		if f == nil && len(name) == 1 && !strings.HasPrefix(arg, "--") {
			f = global.ShorthandLookup(name)
		}
		if f != nil {
			if !hasValue && f.Value.Type() != "bool" {
				i++ // its value
			}
			continue
		}
		if hasValue {
			continue // a subcommand's flag with its value: cobra finds it
		}
		var owners []string
		var walk func(c *cobra.Command)
		walk = func(c *cobra.Command) {
			if lf := c.LocalNonPersistentFlags().Lookup(name); lf != nil && lf.Value.Type() == "bool" && c != root {
				owners = append(owners, c.CommandPath())
			}
			for _, sub := range c.Commands() {
				walk(sub)
			}
		}
		walk(root)
		if len(owners) > 0 {
			return usagef("--%s is a flag of %s: it goes after the command (%s --%s ...)", name, strings.Join(owners, " and "), owners[0], name)
		}
	}
	return nil
}

// jsonError is a failure as --output json writes it, on stderr, so that a
// script reads the gRPC code and the rivet reason instead of parsing text.
type jsonError struct {
	Error struct {
		// Code is the gRPC code's name (NOT_FOUND...), or USAGE for a
		// command line refused before anything was sent.
		Code string `json:"code"`
		// Reason is the rivet error's group.code (actor.unknown_action),
		// if it has one.
		Reason  string `json:"reason,omitempty"`
		Message string `json:"message"`
		Hint    string `json:"hint,omitempty"`
	} `json:"error"`
	Exit int `json:"exit"`
}

// wantsJSON reports whether args ask for --output json: a command line that
// fails before its flags are parsed (an unknown command, a bad flag before
// -o) still gets its error in the form it asked for.
func wantsJSON(args []string) bool {
	for i, s := range args {
		switch s {
		case "--":
			return false
		case "-o", "--output":
			if i+1 < len(args) && args[i+1] == "json" {
				return true
			}
		case "-ojson", "-o=json", "--output=json":
			return true
		}
	}
	return false
}

func writeJSONError(w io.Writer, err error, exit int, hint string) {
	var j jsonError
	j.Exit = exit
	j.Error.Code, j.Error.Message = "USAGE", err.Error()
	var re *runError
	if errors.As(err, &re) {
		j.Error.Code = "UNKNOWN"
		if re.code != "" {
			j.Error.Code = re.code
		}
	}
	var e *rivet.Error
	if errors.As(err, &e) {
		j.Error.Code, j.Error.Message = rpcerr.CodeName(rpcerr.Code(e)), e.Message
		if e.Group != "" || e.Code != "" {
			j.Error.Reason = e.Group + "." + e.Code
		}
	}
	j.Error.Hint = strings.TrimPrefix(hint, "; ")
	b, _ := json.Marshal(j)
	fmt.Fprintln(w, string(printableJSON(b)))
}

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "rivetctl",
		Short: "Call actors and inspect a rivet cluster",
		Long: `rivetctl calls actors and inspects a rivet cluster over gRPC.

KEY is a plain string, or a JSON array of strings if it starts with '['; neither may be empty.
JSON arguments are taken literally: quote strings ('"text"'); a negative number goes after -- (increment -- -5).`,
		Version:       buildinfo.String(),
		SilenceErrors: true,
		SilenceUsage:  true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if a.output != "text" && a.output != "json" {
				return usagef("--output must be text or json, not %q", a.output)
			}
			if a.timeout <= 0 {
				return usagef("--timeout must be positive, not %s", a.timeout)
			}
			// Given empty, most often as an unset shell variable (--addr
			// "$NODE"): the client would take it for $RIVET_ENDPOINT or
			// localhost:6420, another node than the one meant.
			if a.addr = strings.TrimSpace(a.addr); a.addr == "" || a.emptyAddr {
				return usagef("--addr is empty (leave it out for $%s, else %s)", client.EndpointEnv, client.DefaultEndpoint)
			}
			if (a.tlsCert == "") != (a.tlsKey == "") {
				return usagef("--tls-cert and --tls-key go together")
			}
			// Read here, not as the flag's default, so that --help does
			// not print the token.
			if !cmd.Flags().Changed("token") {
				a.token = a.getenv(client.TokenEnv)
			}
			return nil
		},
	}
	root.SetVersionTemplate("{{.Version}}\n") // the build alone, as the first line of the node's --version
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		if m := negativeNumber.FindStringSubmatch(err.Error()); m != nil && json.Valid([]byte(m[1])) {
			// A JSON argument such as increment's -5: no flag of ours
			// is a digit, but the parser takes any "-..." for flags.
			return usagef("%s reads as a flag: put -- before a negative number (%s ... -- %s)", m[1], cmd.CommandPath(), m[1])
		}
		return usagef("%v (see %s --help)", err, cmd.CommandPath())
	})
	addr := a.getenv(client.EndpointEnv)
	if addr == "" {
		addr = client.DefaultEndpoint
	}
	f := root.PersistentFlags()
	a.addr = addr
	f.Var(&addrsFlag{p: &a.addr, empty: &a.emptyAddr}, "addr", "node address host:port, or several nodes of one cluster, comma-separated or the flag repeated (env "+client.EndpointEnv+")")
	f.StringVarP(&a.output, "output", "o", "text", "output format: text or json")
	f.DurationVar(&a.timeout, "timeout", 10*time.Second, "deadline of the whole command")
	f.BoolVar(&a.tls, "tls", false, "dial with TLS, verifying the node against the system's roots (implied by --tls-ca and --tls-cert)")
	f.StringVar(&a.tlsCA, "tls-ca", a.getenv(envTLSCA), "PEM CAs that verify the node's certificate; turns TLS on (env "+envTLSCA+")")
	f.StringVar(&a.tlsCert, "tls-cert", a.getenv(envTLSCert), "PEM client certificate for a node that requires one (mTLS); turns TLS on (env "+envTLSCert+")")
	f.StringVar(&a.tlsKey, "tls-key", a.getenv(envTLSKey), "PEM key of --tls-cert (env "+envTLSKey+")")
	f.StringVar(&a.token, "token", "", "bearer token for a node that requires one (env "+client.TokenEnv+", which ps does not show)")

	root.AddCommand(
		a.callCommand(),
		a.sendCommand(),
		a.stateCommand(),
		a.inspectCommand(),
		a.actorsCommand(),
		a.createCommand(),
		a.destroyCommand(),
		a.membersCommand(),
		a.drainCommand(),
		a.backupCommand(),
		a.partitionsCommand(),
		a.statsCommand(),
		a.hotCommand(),
		a.logLevelCommand(),
		a.healthCommand(),
		a.historyCommand(),
		a.workflowCommand(),
		a.watchCommand(),
		a.scheduleCommand(),
		a.certsCommand(),
	)
	// cobra answers `completion bogus` and `help bogus` with help and
	// exit 0, as it did a group's unknown subcommand (see group): made
	// here, so that ExecuteC finds them and adds none of its own. The
	// completion scripts go to the writer set now.
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	root.InitDefaultCompletionCmd()
	root.InitDefaultHelpCmd()
	for _, c := range root.Commands() {
		switch c.Name() {
		case "completion":
			// Its NoArgs answered `completion bogus` before group could
			// add the hint every other group gives.
			c.Args = cobra.ArbitraryArgs
			c.RunE = group
		case "help":
			show := c.Run
			c.RunE = func(cmd *cobra.Command, args []string) error {
				if target, rest, err := cmd.Root().Find(args); err != nil || target == nil || len(rest) > 0 {
					return usagef("unknown help topic %q (see %s --help)", strings.Join(args, " "), cmd.Root().CommandPath())
				}
				show(cmd, args)
				return nil
			}
		}
	}
	return root
}

// addrsFlag is --addr: given more than once, its values add up (a list of
// nodes), where a plain string flag kept the last one alone and dropped
// the others without a word (a cluster trial).
type addrsFlag struct {
	p     *string
	empty *bool
	set   bool
}

func (f *addrsFlag) String() string {
	if f.p == nil {
		return ""
	}
	return *f.p
}

func (f *addrsFlag) Set(v string) error {
	if strings.TrimSpace(v) == "" {
		// An unset shell variable (--addr "$NODE"), beside other --addr
		// or not: noted for the usage error below, else it would drop
		// out of the list, and the node meant with it go unchecked.
		*f.empty = true
	}
	if f.set {
		*f.p += "," + v
	} else {
		*f.p, f.set = v, true
	}
	return nil
}

func (f *addrsFlag) Type() string { return "string" }

// args checks the number of positional arguments with a message that
// shows the command's usage line.
func args(lo, hi int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < lo || hi >= 0 && len(args) > hi {
			noun := "arguments"
			if len(args) == 1 {
				noun = "argument"
			}
			return usagef("usage: %s (got %d %s)", cmd.UseLine(), len(args), noun)
		}
		return nil
	}
}

// group is the RunE of a command that only holds subcommands (workflow,
// schedule). Without one, cobra answers an unknown subcommand of a group
// with the group's help and exit 0, so that a script's `workflow retyr`
// passed for a retry that worked.
func group(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return cmd.Help()
	}
	hint := ""
	cmd.SuggestionsMinimumDistance = 2 // as cobra's for the root's commands
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		hint = "did you mean " + strings.Join(s, " or ") + "? "
	}
	return usagef("unknown command %q for %q (%ssee %s --help)", args[0], cmd.CommandPath(), hint, cmd.CommandPath())
}

// command is the body of a subcommand: it gets a connected client and a
// context bounded by --timeout.
type command func(ctx context.Context, c *client.Client, args []string) error

// runE adapts a command to cobra: it connects, applies --timeout (plus
// extra, for commands that wait by design), and marks failures as run
// errors (exit 1) unless the command found a usage error.
func (a *app) runE(extra func() time.Duration, body command) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		a.preloadJSON(cmd, args)
		timeout, limits := a.timeout, "--timeout"
		if extra != nil {
			e := extra()
			if e > 0 {
				// A deadline that ran out says which flags gave it: a
				// backup's hour is its --wait, not --timeout.
				limits = "--timeout, plus the command's own wait"
			}
			// Saturated: a long --timeout plus a long wait (watch's
			// hundred years, a --wait-timeout or --for of thousands of
			// hours) wrapped past time.Duration's range to a negative
			// deadline, and the command failed at once.
			if e > 0 && timeout > math.MaxInt64-e {
				timeout = math.MaxInt64
			} else {
				timeout += e
			}
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
		defer cancel()
		c, err := client.New(a.addr, a.clientOptions()...)
		if err != nil {
			// New connects to nothing: what it refuses is the command
			// line's (an address without a port, a TLS file that cannot
			// be read), and a script must not take it for a node's failure.
			return &usageError{msg: err.Error()}
		}
		defer c.Close()
		err = body(ctx, c, args)
		var ue *usageError
		var re *runError
		switch {
		case err == nil:
			return nil
		case errors.As(err, &ue):
			return err
		case errors.As(err, &re):
			// The command said what happened itself (a wait that ran
			// out while the node answered, say).
			return err
		case errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded):
			return a.deadlineErrorOf(err, timeout, limits, mayHaveRun(cmd, err))
		default:
			return &runError{err: err, note: mayHaveRun(cmd, err)}
		}
	}
}

// deadlineError is the failure of a command whose deadline, timeout, ran
// out with err, followed by note.
func (a *app) deadlineError(err error, timeout time.Duration, note string) error {
	return a.deadlineErrorOf(err, timeout, "--timeout", note)
}

// deadlineErrorOf is deadlineError for a deadline limits (flags) set.
func (a *app) deadlineErrorOf(err error, timeout time.Duration, limits, note string) error {
	why := ""
	if before := client.EarlierFailure(err); before != nil {
		// An attempt before the last could not reach the node: why
		// (down, or wanting TLS) says more than the deadline.
		why = "; an attempt before failed: " + describe(before) + a.connectionHint(before)
	}
	return &runError{err: fmt.Errorf("deadline exceeded: no answer from %s within %s (%s)%s (DEADLINE_EXCEEDED)", a.addr, timeout, limits, why), code: "DEADLINE_EXCEEDED", note: note}
}

// sideEffectsAnnotation marks a command whose request changes something
// (the client does not retry it once it may have reached a node).
const sideEffectsAnnotation = "rivetctl/side-effects"

// mayHaveRun is the note of a command with side effects that failed after
// its request may have run all the same (its connection broke mid-call,
// its deadline ran out): a user who runs it again as the error alone
// suggests could apply it twice (an increment counted twice). A request
// that never reached a node (refused, not resolved, a connection that
// never became ready) is not of an unknown outcome: the client knows it
// from gRPC, whatever the error's text.
func mayHaveRun(cmd *cobra.Command, err error) string {
	if cmd.Annotations[sideEffectsAnnotation] == "" || !rivet.OutcomeUnknown(err) {
		return ""
	}
	if f := cmd.Flags().Lookup("read-only"); f != nil && f.Value.String() == "true" {
		return "" // the node ran a read-only action, or nothing
	}
	if f := cmd.Flags().Lookup("idempotency-key"); f != nil && f.Value.String() != "" {
		switch cmd.Name() {
		case "create":
			if errors.Is(err, rivet.ErrAlreadyExists) {
				// The client's retry after a broken connection, answered
				// by a node older than the key, which ignores it.
				return "; an earlier attempt, whose connection broke, may have created the actor all the same: a node older than --idempotency-key ignores it, so the actor that exists may be this create's (look: rivetctl inspect)"
			}
			return "; it may have created the actor all the same: run it again with the same --idempotency-key and --input, which says duplicate if it did"
		case "call":
			return "; it may have run all the same: run it again with the same --idempotency-key, which runs it at most once"
		}
		return "; it may have been queued all the same: send it again with the same --idempotency-key, which queues it at most once"
	}
	if cmd.Name() == "create" {
		// Sent again, it is ALREADY_EXISTS either way.
		return "; it may have created the actor all the same: ALREADY_EXISTS if it is run again would not tell this create's actor from another's (--idempotency-key would)"
	}
	if cmd.Name() == "send" {
		// A send "runs" nothing: what may have happened is a message
		// queued, which inspect shows (a user trial's send --wait through
		// a node's kill -9 was told to look at the state).
		return "; it may have been queued all the same: look (rivetctl inspect: its queues, and what its workflow took) before sending it again, which could queue it twice (--idempotency-key queues a send at most once)"
	}
	return "; it may have run all the same: look (rivetctl state, inspect) before running it again, which could apply it twice"
}

// bareWriteFailure is how gRPC words a failure to flush a new
// connection's preface and settings, which it returns unwrapped: a port
// that closes connections at once (as a TLS-only node does to a plaintext
// client) fails so when the close comes before the client wrote its own
// preface, and with "error reading server preface" otherwise.
var bareWriteFailure = regexp.MustCompile(`^write (tcp|unix) \S+: write: (broken pipe|connection reset by peer)$`)

// The environment variables of the TLS flags: the same names the node
// reads for its own certificate and CA, so that rivetctl run inside a
// node's container (its health check) dials the node as a peer would.
const (
	envTLSCA   = "RIVET_TLS_CA"
	envTLSCert = "RIVET_TLS_CERT"
	envTLSKey  = "RIVET_TLS_KEY"
)

// clientOptions returns the client's credentials from the flags. The token
// is always given, even empty, so that the client does not read the
// process environment behind getenv's back.
//
// Retries of UNAVAILABLE stop after 5 s, not the client's default 15 s
// (which rides out a failover for a program): a person at a terminal
// asking a node that is not there wants to hear so, and runs the command
// again when the cluster is back.
func (a *app) clientOptions() []client.Option {
	opts := []client.Option{client.WithToken(a.token), client.WithRetry(50*time.Millisecond, cliRetryBudget)}
	if a.tls || a.tlsCA != "" || a.tlsCert != "" {
		opts = append(opts, client.WithTLS(a.tlsCA, a.tlsCert, a.tlsKey))
	}
	return opts
}

// describe renders an error for people: for a rivet error, what kind of
// failure it was in gRPC's words, the node's message, and the codes to
// search for, e.g.
//
//	not found: actor counter ["nope"] does not exist (NOT_FOUND actor.not_found)
func describe(err error) string {
	var e *rivet.Error
	if !errors.As(err, &e) {
		return err.Error()
	}
	code := rpcerr.Code(e)
	name := rpcerr.CodeName(code)
	what := strings.ToLower(strings.ReplaceAll(name, "_", " "))
	if errors.Is(e, rivet.ErrUser) {
		what = "error"
	}
	tag := name
	if e.Group != "" || e.Code != "" {
		tag += " " + e.Group + "." + e.Code
	}
	return fmt.Sprintf("%s: %s (%s)", what, e.Message, tag)
}

// connectionHint says what most likely went wrong with a connection
// whose failure gRPC describes only in transport terms (an EOF or a reset
// reading the server preface is a node that wants TLS). Only for failures of
// the connection itself: UNAVAILABLE without a rivet error of the node's;
// and for a refused token, whose message speaks of gRPC metadata, which
// rivetctl's user sets with a flag.
func (a *app) connectionHint(err error) string {
	var e *rivet.Error
	if errors.As(err, &e) && errors.Is(e, rivet.ErrUnauthenticated) {
		if a.token == "" {
			return fmt.Sprintf("; the node requires a token: pass --token (or env %s)", client.TokenEnv)
		}
		return fmt.Sprintf("; the token given (--token, or env %s) is not the node's", client.TokenEnv)
	}
	if errors.As(err, &e) && e.Group == "" && strings.HasPrefix(e.Message, "unknown service rivet.v1.") {
		// gRPC's answer for a service the server does not have: a server
		// with none of rivet's, such as an etcd's client port.
		return fmt.Sprintf("; %s serves gRPC but not rivet's API (an etcd?): --addr takes a node's gRPC address, its --grpc-addr (port 6420 by default)", a.addr)
	}
	if !errors.As(err, &e) || !errors.Is(e, rivet.ErrUnavailable) || e.Group != "" || e.Code != "" {
		return ""
	}
	msg := e.Message
	usesTLS := a.tls || a.tlsCA != "" || a.tlsCert != ""
	closed := strings.Contains(msg, "server preface") && (strings.Contains(msg, "EOF") || strings.Contains(msg, "connection reset")) ||
		bareWriteFailure.MatchString(msg)
	if usesTLS {
		// The TLS handshake broke off: no TLS server, or one that wants
		// a client certificate.
		closed = strings.Contains(msg, "handshake failed") &&
			(strings.Contains(msg, "EOF") || strings.Contains(msg, "connection reset") || strings.Contains(msg, "broken pipe"))
	}
	if closed && a.probeTLS != nil && a.probeTLS(a.addr) == tlsNotServed {
		// Closed without a word of TLS: a port that is not gRPC, as a
		// node's gossip port (memberlist, 7946 by default) is.
		return fmt.Sprintf("; %s does not answer gRPC (a node's gossip port?): --addr takes a node's gRPC address, its --grpc-addr (port 6420 by default)", a.addr)
	}
	switch {
	case strings.Contains(msg, "connection refused"):
		return fmt.Sprintf("; is a node listening at %s? (--addr, or env %s)", a.addr, client.EndpointEnv)
	case strings.Contains(msg, "name resolver error") || strings.Contains(msg, "no such host"):
		return fmt.Sprintf("; the host of %s does not resolve (--addr, or env %s)", a.addr, client.EndpointEnv)
	case strings.Contains(msg, "looked like an HTTP/1.1 header"):
		return "; this looks like an HTTP port, not a node's gRPC address (--addr)"
	case strings.Contains(msg, "first record does not look like a TLS handshake"):
		return "; the node does not serve TLS: leave out --tls, --tls-ca and --tls-cert (and RIVET_TLS_* in the environment)"
	case (strings.Contains(msg, "server preface") && (strings.Contains(msg, "EOF") || strings.Contains(msg, "connection reset")) ||
		bareWriteFailure.MatchString(msg)) && !usesTLS:
		// The node closed the connection before its preface: EOF, or
		// "connection reset by peer" when the TLS server closed it with
		// the client's plaintext preface still unread (seen under load),
		// or a broken pipe when it closed before the client wrote it all.
		return "; the node may serve TLS only: pass --tls-ca (or env RIVET_TLS_CA)"
	case usesTLS && a.tlsCert == "" &&
		(strings.Contains(msg, "broken pipe") || strings.Contains(msg, "certificate required") ||
			strings.Contains(msg, "connection reset") || strings.Contains(msg, "server preface")):
		return "; the node may require a client certificate: pass --tls-cert and --tls-key"
	}
	return ""
}

// oneLine keeps an error on one line, whatever the node put in it.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// cliRetryBudget bounds rivetctl's retries of UNAVAILABLE (clientOptions).
const cliRetryBudget = 5 * time.Second
