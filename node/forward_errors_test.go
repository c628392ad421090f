package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/examples/counter"
	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
	"github.com/rivet-go/rivet/internal/rpcerr"
)

type errorsState struct{}

// blocker's wait runs until its caller gives up.
var blocker = rivet.Actor[errorsState]{
	Name: "blocker",
	Actions: rivet.Actions[errorsState]{
		"wait": rivet.Query(func(c *rivet.ActionCtx[errorsState]) (int, error) {
			<-c.Context().Done()
			return 0, c.Context().Err()
		}),
	},
}

// errer's fail returns an error of its own with an n-byte message.
var errer = rivet.Actor[errorsState]{
	Name: "errer",
	Actions: rivet.Actions[errorsState]{
		"fail": rivet.QueryArg(func(c *rivet.ActionCtx[errorsState], n int) (int, error) {
			return 0, rivet.UserError("too_long", strings.Repeat("e", n), nil)
		}),
	},
}

// An actor's error larger than the peer stream's bound reaches its caller
// cut to fit (directly or forwarded), its kind and code intact, and fails no other call
// forwarded on the same stream (it broke the stream, and all of them).
func TestALargeActorErrorForwardedFailsNoOtherCall(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	reg, err := rivet.Setup(blocker, errer, counter.Actor)
	if err != nil {
		t.Fatal(err)
	}
	na, nb := twoNodesWith(t, ctx, reg, "/bigerr/")
	errKey, blockKey := keysOn(na, "errer", "e", 1)[0], keysOn(na, "blocker", "s", 1)[0]
	onA, onB := rawActorClient(t, na.GRPCAddr()), rawActorClient(t, nb.GRPCAddr())
	fail := &rivetv1.CallRequest{Actor: &rivetv1.ActorRef{Name: "errer", Key: []string{errKey}}, Action: "fail", Args: []byte("[3145728]"), CreateIfMissing: true}
	asError := func(err error) *rivet.Error { return rpcerr.FromStatus(status.Convert(err)) }

	// On its owner too it comes cut (rpcerr.Bound), to fit a client's
	// header list.
	_, direct := onA.Call(ctx, fail)
	if e := asError(direct); !errors.Is(e, rivet.ErrUser) || e.Code != "too_long" || !strings.HasPrefix(e.Message, "eee") || !strings.Contains(e.Message, "(cut: 3145728 bytes in all)") || len(e.Message) > rpcerr.MaxMessageBytes {
		t.Fatalf("called on its owner: %.300v; want the actor's error, cut", direct)
	}
	other := make(chan error, 1)
	go func() {
		wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
		defer wcancel()
		_, err := onB.Call(wctx, &rivetv1.CallRequest{Actor: &rivetv1.ActorRef{Name: "blocker", Key: []string{blockKey}}, Action: "wait", Args: []byte("[]"), CreateIfMissing: true})
		other <- err
	}()
	waitUntil(t, "the other call to run on node a", 10*time.Second, func() bool { return na.Host().Stats().ActiveActors >= 2 })
	_, forwarded := onB.Call(ctx, fail)
	if e := asError(forwarded); !errors.Is(e, rivet.ErrUser) || e.Code != "too_long" || !strings.HasPrefix(e.Message, "eee") || !strings.Contains(e.Message, "(cut: 3145728 bytes in all)") {
		t.Errorf("called through node b: %.300v; want the actor's error, cut", forwarded)
	}
	if err := <-other; status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("a call forwarded on the same stream ended with %v, want its own DEADLINE_EXCEEDED", err)
	}
}

// longErr's fail returns an error of its own with a message of about N
// bytes (Char repeated) and metadata of a JSON string of Meta bytes.
var longErr = rivet.Actor[errorsState]{
	Name: "longerr",
	Actions: rivet.Actions[errorsState]{
		"fail": rivet.QueryArg(func(c *rivet.ActionCtx[errorsState], a longErrArgs) (int, error) {
			return 0, rivet.UserError("long", strings.Repeat(a.Char, a.N/len(a.Char)), strings.Repeat("m", a.Meta))
		}),
	},
}

type longErrArgs struct {
	N    int    `json:"n"`
	Char string `json:"char"`
	Meta int    `json:"meta"`
}

// An actor's error with a long message and large metadata reaches a client
// whose header list is bounded to 8 KiB (grpc-java's default) whole but
// for the cut: its code, its ActorError (group, code) and the start of its
// message, called on the owner or through another node, ASCII or not.
// Before the bound, such a client got only INTERNAL "stream terminated by
// RST_STREAM".
func TestALongActorErrorFitsAnEightKiBHeaderList(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	reg, err := rivet.Setup(longErr)
	if err != nil {
		t.Fatal(err)
	}
	na, nb := twoNodesWith(t, ctx, reg, "/longerr/")
	key := keysOn(na, "longerr", "l", 1)[0]
	dial := func(addr string) rivetv1.ActorServiceClient {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithMaxHeaderListSize(8192))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return rivetv1.NewActorServiceClient(conn)
	}
	onA, onB := dial(na.GRPCAddr()), dial(nb.GRPCAddr())
	for _, c := range []struct {
		name      string
		char      string
		meta      int
		keepsMeta bool
		via       rivetv1.ActorServiceClient
		viaName   string
	}{
		{"ascii, large metadata", "e", 100_000, false, onA, "owner"},
		{"ascii, large metadata", "e", 100_000, false, onB, "forwarder"},
		{"non-ascii, large metadata", "é", 100_000, false, onA, "owner"},
		{"non-ascii, large metadata", "é", 100_000, false, onB, "forwarder"},
		{"ascii, small metadata", "e", 500, true, onA, "owner"},
		{"non-ascii, small metadata", "日", 500, true, onB, "forwarder"},
	} {
		t.Run(c.name+" via "+c.viaName, func(t *testing.T) {
			args, _ := json.Marshal([]longErrArgs{{N: 100_000, Char: c.char, Meta: c.meta}})
			_, err := c.via.Call(ctx, &rivetv1.CallRequest{Actor: &rivetv1.ActorRef{Name: "longerr", Key: []string{key}}, Action: "fail", Args: args, CreateIfMissing: true})
			st := status.Convert(err)
			if st.Code() != codes.Unknown || !rpcerr.HasActorError(st) {
				t.Fatalf("got %v %.300q (details %d); want UNKNOWN with an ActorError", st.Code(), st.Message(), len(st.Details()))
			}
			e := rpcerr.FromStatus(st)
			if !errors.Is(e, rivet.ErrUser) || e.Group != "user" || e.Code != "long" {
				t.Errorf("got %s.%s (%v); want user.long", e.Group, e.Code, e.Kind)
			}
			if !strings.HasPrefix(e.Message, c.char+c.char) || !strings.Contains(e.Message, "... (cut: ") || !utf8.ValidString(e.Message) {
				t.Errorf("message %.300q; want the actor's, cut", e.Message)
			}
			if c.keepsMeta != (len(e.Metadata) == c.meta+2) {
				t.Errorf("metadata of %d bytes; kept: %v, want %v", len(e.Metadata), len(e.Metadata) > 0, c.keepsMeta)
			}
			if !c.keepsMeta && !strings.Contains(e.Message, fmt.Sprintf("(metadata of %d bytes left out)", c.meta+2)) {
				t.Errorf("message %.300q; want it to say the metadata was left out", e.Message)
			}
			if n := rpcerr.TrailerSize(st); n > rpcerr.MaxTrailerBytes {
				t.Errorf("the status takes %d bytes of trailers, over %d", n, rpcerr.MaxTrailerBytes)
			}
		})
	}
}

// A request that fits the transport of the node it reaches but not the
// peer stream to the actor's owner (the forward adds an envelope, so the
// last few KiB below the transport's bound do not fit) gets the error its
// owner gives it called directly: the payload over its limit, named, with
// that limit. It said "request to forward too large", with a limit of
// about 9 MiB: a hop the caller knows nothing of, and a limit that is not
// the one its payload broke.
func TestARequestTooLargeToForwardGetsTheErrorItGetsFromItsOwner(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	reg, err := rivet.Setup(inbox, counter.Actor)
	if err != nil {
		t.Fatal(err)
	}
	na, nb := twoNodesWith(t, ctx, reg, "/toolargefwd/")
	counterKey, inboxKey := keysOn(na, "counter", "c", 1)[0], keysOn(na, "inbox", "i", 1)[0]
	onA, onB := rawActorClient(t, na.GRPCAddr()), rawActorClient(t, nb.GRPCAddr())
	// A JSON string of n bytes. The transport's bound is 9 MiB (twice the
	// 4 MiB limit, plus 1 MiB); a request of these payloads is within 1
	// KiB of it.
	str := func(n int) []byte { return []byte(`"` + strings.Repeat("x", n-2) + `"`) }
	const near = 9<<20 - 1<<10
	counterRef := &rivetv1.ActorRef{Name: "counter", Key: []string{counterKey}}
	inboxRef := &rivetv1.ActorRef{Name: "inbox", Key: []string{inboxKey}}
	cases := []struct {
		name string
		call func(rivetv1.ActorServiceClient) error
		want string
	}{
		{"call, its arguments", func(c rivetv1.ActorServiceClient) error {
			_, err := c.Call(ctx, &rivetv1.CallRequest{Actor: counterRef, Action: "increment", Args: append(append([]byte("["), str(near-2)...), ']'), CreateIfMissing: true})
			return err
		}, "action arguments too large"},
		{"call, its input", func(c rivetv1.ActorServiceClient) error {
			_, err := c.Call(ctx, &rivetv1.CallRequest{Actor: counterRef, Action: "increment", Args: []byte("[1]"), Input: str(near), CreateIfMissing: true})
			return err
		}, "create input too large"},
		{"call, an invalid action name first", func(c rivetv1.ActorServiceClient) error {
			_, err := c.Call(ctx, &rivetv1.CallRequest{Actor: counterRef, Action: "", Args: []byte("[1]"), Input: str(near), CreateIfMissing: true})
			return err
		}, "action name is empty"},
		{"send, its input", func(c rivetv1.ActorServiceClient) error {
			_, err := c.Send(ctx, &rivetv1.SendRequest{Actor: inboxRef, Queue: "q", Body: []byte("1"), Input: str(near), CreateIfMissing: true})
			return err
		}, "create input too large"},
		{"create, its input", func(c rivetv1.ActorServiceClient) error {
			_, err := c.Create(ctx, &rivetv1.CreateRequest{Actor: counterRef, Input: str(near)})
			return err
		}, "create input too large"},
		{"get or create, its input", func(c rivetv1.ActorServiceClient) error {
			_, err := c.GetOrCreate(ctx, &rivetv1.GetOrCreateRequest{Actor: counterRef, Input: str(near)})
			return err
		}, "create input too large"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			direct, forwarded := status.Convert(c.call(onA)), status.Convert(c.call(onB))
			if !strings.Contains(direct.Message(), c.want) {
				t.Fatalf("called on the owner: %v %q, want %q", direct.Code(), direct.Message(), c.want)
			}
			if forwarded.Code() != direct.Code() || forwarded.Message() != direct.Message() {
				t.Errorf("called through node b: %v %q; want what the owner answers: %v %q", forwarded.Code(), forwarded.Message(), direct.Code(), direct.Message())
			}
			de, fe := rpcerr.FromStatus(direct), rpcerr.FromStatus(forwarded)
			if de.Group != fe.Group || de.Code != fe.Code {
				t.Errorf("called through node b: %s.%s, want the owner's %s.%s", fe.Group, fe.Code, de.Group, de.Code)
			}
		})
	}
}

// rawActorClient is a bare gRPC client of the node at addr, which sends and
// takes messages of up to 64 MiB: the node's own limits decide.
func rawActorClient(t *testing.T, addr string) rivetv1.ActorServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20), grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rivetv1.NewActorServiceClient(conn)
}
