package node

import (
	"testing"

	"github.com/rivet-go/rivet/runtime"
)

// A call, send or create forwarded to another node is sent again after its
// hop broke mid-call only when that cannot run it twice: a read-only call,
// or a call, send or create with an idempotency key (the owner answers a
// keyed send it queued already as a duplicate, a waiting one with the
// first message's completion, a keyed create that applied as its
// duplicate), as the Go client retries them. do's own rule, given the
// answer, is TestAReadOnlyCallRunsOnlyAQueryAndIsSentAgainAfterABrokenHop's.
func TestOnlyRequestsThatCannotRunTwiceAreSentAgainAfterABrokenHop(t *testing.T) {
	for _, c := range []struct {
		what string
		got  resend
		want resend
	}{
		{"a call", callResend(runtime.CallRequest{}), resendNever},
		{"a read-only call", callResend(runtime.CallRequest{ReadOnly: true}), resendReadOnly},
		{"a keyed call", callResend(runtime.CallRequest{IdempotencyKey: "k"}), resendKeyed},
		{"a send", sendResend(runtime.SendRequest{}), resendNever},
		{"a waiting send", sendResend(runtime.SendRequest{Wait: true}), resendNever},
		{"a keyed send", sendResend(runtime.SendRequest{IdempotencyKey: "k"}), resendKeyed},
		{"a keyed waiting send", sendResend(runtime.SendRequest{IdempotencyKey: "k", Wait: true}), resendKeyed},
		{"an actor's create", createResend(runtime.CreateOptions{}), resendNever},
		{"an actor's keyed create", createResend(runtime.CreateOptions{IdempotencyKey: "k"}), resendKeyed},
	} {
		if c.got != c.want {
			t.Errorf("%s: resend %v, want %v", c.what, c.got, c.want)
		}
	}
}
