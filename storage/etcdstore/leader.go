package etcdstore

import (
	"context"
	"errors"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rivet-go/rivet/storage"
)

// ErrLeaderChanged is the error of a write (a Commit, a Claim or a
// Release) that was in flight when etcd's leader changed and was given up
// once a leader of the new term served: its outcome is unknown (a caller
// must treat it like a timeout).
var ErrLeaderChanged = errors.New("etcdstore: etcd's leader changed while the commit was in flight")

// LeaderChanges is what an etcd member in this process tells of its raft
// leader. An *etcdserver.EtcdServer has both methods.
type LeaderChanges interface {
	// LeaderChangedNotify returns a channel closed when the member learns
	// of a new leader.
	LeaderChangedNotify() <-chan struct{}
	// FirstCommitInTermNotify returns a channel closed when the member
	// applies the first entry of a new leader's term.
	FirstCommitInTermNotify() <-chan struct{}
}

// WithLeaderChanges makes the Store give up, with ErrLeaderChanged, the
// commits that were in flight when lc's leader changed and are still
// waiting once the new leader's first entry has been applied here (plus a
// short margin).
//
// Why: a member forwards a write to the leader, and if the leader dies with
// the write not yet replicated, the write is lost, but the member waits for
// it until its request timeout (5 s plus two election timeouts, 6 s with
// the embedded members' timings). Every actor of a surviving node with a
// write in flight stalled that long, longer than the failover of the dead
// node's own actors (docs/benchmarks.md).
//
// Giving up is not safe on its own, and is not meant to be: cancelling a
// request does not withdraw its raft proposal, so a write proposed around
// the change may still apply after its caller heard it was given up.
// ErrLeaderChanged therefore means "outcome unknown", like etcd's own
// timeout (which has the same hole, 6 s wide). What makes it safe is the
// storage.Committer: a write in doubt makes it refuse every later write on
// the same partition claim (CommitterConfig.OnInDoubt) until the node has
// replaced the claim, so that the late write, if it ever applies, either
// comes before the new claim (and the actors reloaded after it see it) or
// fails its fence.
func WithLeaderChanges(lc LeaderChanges) Option { return func(s *Store) { s.leader = lc } }

// WithTermProbe is WithLeaderChanges for a Store whose etcd members run
// elsewhere (a node started with --etcd-endpoints), with no member in this
// process to say when the leader changed. The Store learns of raft terms
// from the headers of etcd's answers (commits, lease renewals) and, while
// a commit has waited longer than a healthy one takes (probeAfter), asks
// with a linearizable read, which etcd answers only once a leader has
// committed an entry of its term. An answer from a newer term than a
// waiting commit began in means the leader changed under it: the commit
// is given up with ErrLeaderChanged (after leaderMargin), as
// WithLeaderChanges does. A term learned late can make a commit that was
// merely slow look like one from before a change; giving it up is still
// safe (see WithLeaderChanges), it only costs its partition a re-fence.
//
// With WithLeaderChanges as well, the member in this process is followed
// and no probe runs.
func WithTermProbe() Option { return func(s *Store) { s.probe = true } }

const (
	// probeEvery is how often the prober looks for waiting commits, and
	// probeAfter how long a commit waits before it asks etcd's term: far
	// beyond a healthy commit (a few fsyncs), far below etcd's timeout.
	probeEvery = 100 * time.Millisecond
	probeAfter = 300 * time.Millisecond
	// probeTimeout bounds one probe: without a leader it waits for one.
	probeTimeout = time.Second
)

// observe notes a raft term from the header of an etcd answer; a term
// newer than any seen before counts as a leader change.
func (s *Store) observe(term uint64) {
	if !s.probe || term == 0 {
		return
	}
	s.inflightMu.Lock()
	if term > s.term {
		if s.term != 0 {
			s.leaderEpoch++
		}
		s.term = term
	}
	s.inflightMu.Unlock()
}

// probeTerms gives up, while commits wait too long, those that began
// before a leader change that a linearizable read has seen completed.
func (s *Store) probeTerms() {
	defer s.bg.Done()
	// The first term seen is the base, never a change: learn it now,
	// before writes start, rather than from the first answer after one.
	_, _ = s.readTerm()
	t := time.NewTicker(probeEvery)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-s.closed:
			return
		}
		s.inflightMu.Lock()
		waiting := false
		for _, c := range s.inflight {
			if time.Since(c.start) > probeAfter {
				waiting = true
				break
			}
		}
		s.inflightMu.Unlock()
		if !waiting {
			continue
		}
		term, err := s.readTerm()
		if err != nil {
			// Without a leader the read waits and fails; the next tick
			// asks again. (A probe etcd always refuses, say for want of
			// permission on the prefix, leaves writes to etcd's own
			// timeout, as before the probe.)
			continue
		}
		s.inflightMu.Lock()
		epoch := s.leaderEpoch
		// Only an answer from the newest term seen says that a leader
		// of that term serves; a lagging member's says nothing.
		stale := false
		if term >= s.term {
			for _, c := range s.inflight {
				stale = stale || c.epoch < epoch
			}
		}
		s.inflightMu.Unlock()
		if stale && s.sleep(leaderMargin) {
			s.giveUpBefore(epoch)
		}
	}
}

// readTerm asks etcd's raft term with a linearizable read, and notes it.
func (s *Store) readTerm() (uint64, error) {
	ctx, cancel := context.WithTimeout(s.probeCtx, probeTimeout)
	defer cancel()
	resp, err := s.cli.KV.Get(ctx, s.prefix+probeKey, clientv3.WithKeysOnly(), clientv3.WithLimit(1))
	if err != nil {
		return 0, err
	}
	term := resp.Header.GetRaftTerm()
	s.observe(term)
	return term, nil
}

// giveUpBefore gives up, with ErrLeaderChanged, the writes in flight that
// began before leader epoch epoch.
func (s *Store) giveUpBefore(epoch uint64) {
	s.inflightMu.Lock()
	defer s.inflightMu.Unlock()
	for _, c := range s.inflight {
		if c.epoch < epoch {
			c.cancel(ErrLeaderChanged)
		}
	}
}

// probeKey is the key the prober reads (its value is never needed).
const probeKey = "term-probe"

// leaderMargin lets the answers of the writes applied before the new
// leader's first entry reach their callers before the rest is given up.
// (The first entry is waited for as long as it takes: a write that waits
// longer than etcd's own timeout has ended by then.)
const leaderMargin = 100 * time.Millisecond

// begin registers a write (a commit, a claim or a release) to be given up
// at a leader change, when the Store follows them; end, called with the
// write's error, unregisters it and returns ErrLeaderChanged if it was
// given up, else the error mapped to storage's.
func (s *Store) begin(ctx context.Context) (_ context.Context, end func(error) error) {
	if s.inflight == nil {
		return ctx, func(err error) error { return mapErr(s.sawNoSpace(err)) }
	}
	ctx, cancel := context.WithCancelCause(ctx)
	id := s.track(cancel)
	return ctx, func(err error) error {
		s.untrack(id)
		gaveUp := err != nil && errors.Is(context.Cause(ctx), ErrLeaderChanged)
		cancel(nil)
		mapped := mapErr(s.sawNoSpace(err))
		// A write that etcd answered definitely (refused, too large,
		// invalid, lease gone) just as it was given up keeps its answer:
		// a too-large batch is split, a refused one is not in doubt.
		if gaveUp && !definite(mapped) {
			return ErrLeaderChanged
		}
		return mapped
	}
}

// definite says whether err is an answer of etcd that says the write was
// not applied (mapErr's sentinels).
func definite(err error) bool {
	return errors.Is(err, storage.ErrRefused) || errors.Is(err, storage.ErrTooLarge) ||
		errors.Is(err, storage.ErrInvalidTxn) || errors.Is(err, storage.ErrLeaseNotFound)
}

// track registers a commit's cancel func; untrack with the returned id.
func (s *Store) track(cancel context.CancelCauseFunc) uint64 {
	s.inflightMu.Lock()
	defer s.inflightMu.Unlock()
	s.nextCommit++
	s.inflight[s.nextCommit] = trackedCommit{epoch: s.leaderEpoch, start: time.Now(), cancel: cancel}
	return s.nextCommit
}

func (s *Store) untrack(id uint64) {
	s.inflightMu.Lock()
	delete(s.inflight, id)
	s.inflightMu.Unlock()
}

type trackedCommit struct {
	epoch  uint64
	start  time.Time
	cancel context.CancelCauseFunc
}

// followLeader gives up, after each leader change, the commits that began
// before it and still wait once the new term's first entry is applied.
func (s *Store) followLeader() {
	defer s.bg.Done()
	// Both taken before the change: the first commit of the new term
	// comes after the change is known.
	changed, firstCommit := s.leader.LeaderChangedNotify(), s.leader.FirstCommitInTermNotify()
	for {
		select {
		case <-changed:
		case <-s.closed:
			return
		}
		s.inflightMu.Lock()
		s.leaderEpoch++
		epoch := s.leaderEpoch
		s.inflightMu.Unlock()
		// The next change's channel, taken at once: a change before this
		// term's first commit ends the wait, and the loop counts it (its
		// give-up then covers this change's writes too).
		next := s.leader.LeaderChangedNotify()
		select {
		case <-firstCommit:
			// This term committed. The channel of the next term's first
			// commit is a new one from now on (etcd's notifier replaces
			// it at each first commit). Once the term has committed, the
			// writes from before it are given up whatever comes next.
			firstCommit = s.leader.FirstCommitInTermNotify()
			if s.sleep(leaderMargin) {
				s.giveUpBefore(epoch)
			}
		case <-next:
			// Another change before this term committed: firstCommit is
			// still the channel the next first commit closes, unless this
			// term's came at the same moment.
			select {
			case <-firstCommit:
				firstCommit = s.leader.FirstCommitInTermNotify()
			default:
			}
		case <-s.closed:
			return
		}
		changed = next
	}
}

// sleep waits d; it reports false, at once, if the store closes first.
func (s *Store) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.closed:
		return false
	}
}
