// Command rivetctl calls actors and inspects a rivet cluster from a shell.
//
//	rivetctl call counter main increment 5     # prints 5
//	rivetctl send reminderActor main reminders '{"text":"hi","at":0}'
//	rivetctl state counter main
//	rivetctl actors counter
//	rivetctl members
//
// KEY is a plain string, or a JSON array of strings if it starts with '['; neither may be empty.
// Payloads (ARG_JSON, BODY_JSON, --input) are taken literally as JSON, as
// the wire carries them: a string argument needs its quotes ('"text"'). A
// malformed one is refused before anything is sent.
//
// A node with TLS needs --tls-ca (and under mTLS --tls-cert and --tls-key),
// a node with a token --token; each has an environment equivalent
// (RIVET_TLS_CA, RIVET_TLS_CERT, RIVET_TLS_KEY, RIVET_TOKEN). `rivetctl
// certs` writes a CA and the node and client certificates it signs.
//
// Text from the node or its actors (workflow errors, history entries,
// events, member names, error messages, keys) is printed with every
// character that does not print escaped as in JSON (\u001b, \r, \n), so
// that an escape sequence in it never reaches the terminal; JSON output
// (--output json, payloads) escapes them too, which leaves its value as it is.
// A workflow's error of several lines (a failed rollback's follows the
// workflow's own) is shown on one line, its lines joined by "; ", in
// inspect, history and actors --failed alike.
//
// On failure rivetctl prints one line on stderr, with the gRPC code and the
// rivet error code, and exits 1; a usage error (bad flags, arguments or
// JSON on the command line) exits 2.
//
// The command logic lives in this package's run function, which tests call
// in-process with their own arguments, writers and environment.
package main
