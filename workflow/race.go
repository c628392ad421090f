package workflow

import (
	"context"
	"time"
)

// race is the decision state of one running Race. Every field is guarded
// by run.mu, except cancel, which is fixed before the branches start.
type race struct {
	n int
	// decided is set once; winner is then the winning branch, or -1 if
	// every branch failed.
	decided bool
	winner  int
	// claim is the branch that took queue messages and has yet to
	// complete one of them (-1: none): it wins if it finishes, and no
	// other branch may take messages meanwhile. Until it has taken them
	// (claimTaken unset), it only looks: it may wait for the actor's turn
	// (held by a step of another branch, which ends only when the race is
	// decided), and a finisher does not wait for it.
	claim      int
	claimTaken bool
	// holds[b] is set if branch b's recorded history holds messages it
	// took (a replay), until b is found holding none (see
	// handOverLocked); ended[b] once b stopped without a value. When the
	// claim's holder ends, a branch that holds messages and has not ended
	// takes the claim over (see raceEnd).
	holds, ended []bool
	// taking[b] counts the threads of branch b between a claim and its
	// release: one may have taken messages the history has yet to show
	// (durable once the host's Receive returns), so a sibling's
	// completion does not drop b's claim meanwhile; the last release
	// looks again (see dropClaimsLocked).
	taking []int
	// doomed[b] is set for a branch cancelled before the decision because
	// it can no longer win (see doomLocked): it is a loser already.
	doomed []bool
	// live[b] is false while branch b still replays recorded entries;
	// replaying counts those. No winner is picked while it is above 0.
	live      []bool
	replaying int
	cands     []raceCandidate
	failed    int
	// threads are the threads running under each branch (nested join
	// and race branches too), for the floors that hold a decision (see
	// heldLocked); holding counts the finishers waiting on them, or on
	// branches still replaying, which makes every floor change signal.
	threads []raceThread
	holding int
	// heldAtStop is set once a finisher stopped waiting on those floors
	// because the run was stopped: the threads it waited on were at work
	// then, as they are for a finisher still waiting (see
	// thread.holdsARaceLocked).
	heldAtStop bool
	// parent is the thread that runs the race: decided, it stands for the
	// winner in the races it runs under (see decideLocked).
	parent *thread
	// path and names are the race's entry and its branches.
	path   string
	names  []string
	cancel []context.CancelFunc
	// changed is closed (and replaced) on every change, to wake the
	// branches waiting for a decision or a claim.
	changed *change
}

// change is one change of a race, which closes ch. live is set, under
// run.mu, if the run was not stopped when it happened.
type change struct {
	ch   chan struct{}
	live bool
}

// done returns the channel closed by the change (nil, which never is, for
// no change).
func (c *change) done() <-chan struct{} {
	if c == nil {
		return nil
	}
	return c.ch
}

// unholdLocked notes that a thread that waited on the floors of rc's
// threads (holding) no longer does; stopped, that the run was stopped.
func (rc *race) unholdLocked(stopped bool) {
	rc.holding--
	if stopped {
		rc.heldAtStop = true
	}
}

// raceThread is a thread under branch b of a race.
type raceThread struct {
	t *thread
	b int
}

// raceSlot is a thread's place in a race: the race and its branch.
type raceSlot struct {
	r *race
	b int
}

func newRace(n int) *race {
	rc := &race{n: n, winner: -1, claim: -1, live: make([]bool, n), holds: make([]bool, n), taking: make([]int, n), ended: make([]bool, n), doomed: make([]bool, n), cancel: make([]context.CancelFunc, n), changed: &change{ch: make(chan struct{})}}
	for i := range rc.live {
		rc.live[i] = true
	}
	return rc
}

func (rc *race) signalLocked() {
	// Whether the waiters were woken before the run was stopped is
	// decided here, at the wake, not when their goroutines get to look:
	// a wake before the stop that they see only after it is work they
	// had to do when it came (see thread.wait).
	rc.changed.live = rc.parent.r.ctx.Err() == nil
	close(rc.changed.ch)
	rc.changed = &change{ch: make(chan struct{})}
}

func (rc *race) cancelAll() {
	for _, c := range rc.cancel {
		if c != nil {
			c()
		}
	}
}

// liveLocked notes that branch b no longer replays.
func (rc *race) liveLocked(b int) {
	if !rc.live[b] {
		rc.live[b] = true
		rc.replaying--
		rc.signalLocked()
	}
}

func (rc *race) decideLocked(w int) {
	rc.decided = true
	rc.winner = w
	if at, ok := rc.candAt(w); ok && rc.parent != nil {
		// The race ends at the winner's time, once its losers stopped:
		// meanwhile its parent (whose floor is unset while it waits for
		// the branches) holds the races it runs under at that time, as
		// the winner did until it exited.
		rc.parent.setFloorLocked(at, true)
	}
	for i, c := range rc.cancel {
		if i != w {
			c()
		}
	}
	rc.signalLocked()
}

// goLive notes that t is about to do something its history does not
// record (run an attempt, wait, commit): the race branches it runs under
// are done replaying.
func (t *thread) goLive() {
	if t.allLive || len(t.races) == 0 {
		return
	}
	t.r.mu.Lock()
	for _, s := range t.races {
		s.r.liveLocked(s.b)
	}
	t.r.mu.Unlock()
	t.allLive = true
}

// lostARace reports whether a race t runs under was decided for another
// branch.
func (t *thread) lostARace() bool {
	if len(t.races) == 0 {
		return false
	}
	t.r.mu.Lock()
	defer t.r.mu.Unlock()
	for _, s := range t.races {
		if s.lostLocked() {
			return true
		}
	}
	return false
}

// lostLocked reports whether the slot's branch lost: the race was decided
// for another, or the branch was cancelled as one that can no longer win.
func (s raceSlot) lostLocked() bool {
	return s.r.decided && s.r.winner != s.b || s.r.doomed[s.b]
}

// outrankedLocked reports whether a receive of the slot's branch that will
// record at must wait for the race: undecided, another branch finished or
// may still finish before at (earlierLocked), and the branch is not the
// claim's holder (which wins whatever the times: its finishers wait for it,
// and a receive of it that waited for them would never end).
func (s raceSlot) outrankedLocked(at time.Time) bool {
	return !s.r.decided && !(s.r.claim == s.b && s.r.claimTaken) && s.r.earlierLocked(s.b, at)
}

// raceFinish records that branch b returned a value and waits until the
// race is decided (by this branch or another).
func (r *run) raceFinish(c *thread, rc *race, b int) {
	r.mu.Lock()
	rc.liveLocked(b)
	rc.cands = append(rc.cands, raceCandidate{branch: b, at: c.now})
	for !rc.decided {
		// The holder of messages taken, yet to finish, is waited for.
		claimed := rc.claim >= 0 && rc.claimTaken && !rc.finished(rc.claim)
		held := false
		if claimed && rc.replaying == 0 {
			rc.doomLocked()
			// A branch not doomed because it may still finish first
			// (a thread of it replays entries before this one's time)
			// is doomed once it can no longer: its floor rising must
			// wake this branch to look again, as for a held decision.
			// (Else a replay lets it catch up past the time it was
			// doomed at in the first run, and run what it never ran
			// then.)
			held = true
		}
		if rc.replaying > 0 {
			// Branches still replay their entries, at work: as for a
			// held decision, a stop now loses this finish, which their
			// replay would have let win at once (see holdsARaceLocked).
			held = true
		}
		if rc.replaying == 0 && !claimed {
			w := pickWinner(rc.cands, rc.claim)
			if held = rc.heldLocked(w); !held {
				rc.decideLocked(w)
				break
			}
			if rc.claim >= 0 {
				// A receive that ranks its messages by when they came
				// holds the decision while it waits for the actor's
				// turn, which a step of a branch that can no longer win
				// may hold until the decision: cancelled now, it lets
				// the receive have the turn.
				rc.doomLocked()
			}
		}
		ch := rc.changed
		if held {
			rc.holding++
		}
		r.mu.Unlock()
		// Until decided, this branch may still finish the race at its
		// time (for a race it is nested in).
		err := c.wait(waitFor{change: ch, floor: c.now, hasFloor: true})
		r.mu.Lock()
		if held {
			rc.unholdLocked(r.ctx.Err() != nil)
		}
		if err != nil {
			break
		}
	}
	r.mu.Unlock()
}

// doomLocked cancels the branches that can no longer win while a branch
// that took messages (the claim's holder, which wins if it finishes) has
// yet to finish and others have: any branch but those, that holds no
// messages of its own (a replay's next holder) and that cannot finish
// before the earliest finisher (see heldLocked). They would be cancelled
// at the decision anyway; cancelled now, a step of theirs that holds the
// actor's turn lets the holder have it (until the step's timeout, the
// holder, and with it the race, waited for the turn).
func (rc *race) doomLocked() {
	if len(rc.cands) == 0 {
		return
	}
	w := pickWinner(rc.cands, -1)
	at, _ := rc.candAt(w)
	for b := range rc.n {
		if b == rc.claim || rc.ended[b] || rc.doomed[b] || rc.holds[b] || rc.finished(b) || rc.mayFinishFirstLocked(b, w, at) {
			continue
		}
		rc.doomed[b] = true
		rc.cancel[b]()
	}
}

// heldLocked reports whether a branch still running may finish earlier in
// workflow time than w, the finisher pickWinner chose: then the decision
// waits for it. Only a thread catching up on time gone by can: one
// replayed, or woken late, that passes a deadline already due records
// the deadline as its time (see endedAt), so the earlier deadline wins
// whichever goroutine gets there first. A thread running a step or
// waiting for what has not come yet will record a time after now, which
// is not before w's.
func (rc *race) heldLocked(w int) bool {
	if rc.finished(rc.claim) {
		return false // the claim's holder wins whatever the times
	}
	at, _ := rc.candAt(w)
	for b := range rc.n {
		if !rc.ended[b] && !rc.finished(b) && rc.mayFinishFirstLocked(b, w, at) {
			return true
		}
	}
	return false
}

// mayFinishFirstLocked reports whether a thread of branch b may still
// record a time before at, w's, or at it and b declared before w (see
// pickWinner): then b may still beat w.
func (rc *race) mayFinishFirstLocked(b, w int, at time.Time) bool {
	for _, th := range rc.threads {
		if th.b == b && th.t.hasFloor && (th.t.floor.Before(at) || th.t.floor.Equal(at) && b < w) {
			return true
		}
	}
	return false
}

// awaitEarlier waits until no other branch of the races t runs under (but
// those in which t's branch took messages already) may finish before at,
// the time t's receive will record (a message that came while the run was
// behind): one that does wins the race as it would have on time, and t, a
// loser, returns ErrCancelled. Meanwhile t holds the races' finishers at
// at.
func (t *thread) awaitEarlier(at time.Time) error {
	if len(t.races) == 0 {
		return nil
	}
	return t.awaitRanked(at, raceSlot.outrankedLocked)
}

// awaitRanked waits at at, t's floor meanwhile, until no race t runs under
// ranks before a receive of t's by outranked: the race decided (t, a
// loser, gets ErrCancelled), or the branches that finished or might finish
// first did not.
func (t *thread) awaitRanked(at time.Time, outranked func(raceSlot, time.Time) bool) error {
	r := t.r
	r.mu.Lock()
	for {
		t.setFloorLocked(at, true)
		var held *race
		for _, s := range t.races {
			if s.lostLocked() {
				r.mu.Unlock()
				return ErrCancelled
			}
			if held == nil && outranked(s, at) {
				held = s.r
			}
		}
		if held == nil {
			r.mu.Unlock()
			return nil
		}
		// Holding makes every floor change signal (see setFloorLocked).
		// The wait keeps t's floor where it is, at at: changed on the
		// way in and out, it would signal the race each time, and wake
		// this wait at once, and spin.
		ch := held.changed
		held.holding++
		r.mu.Unlock()
		err := t.wait(waitFor{change: ch, floor: at, hasFloor: true})
		r.mu.Lock()
		held.unholdLocked(r.ctx.Err() != nil)
		if err != nil {
			r.mu.Unlock()
			return err
		}
	}
}

// ranksBehind reports whether a receive of t that ranks at at must wait
// for a race t runs under, by behind (raceSlot.outrankedLocked for a
// message that came late, raceSlot.outrunLocked for one already there).
func (t *thread) ranksBehind(at time.Time, behind func(raceSlot, time.Time) bool) bool {
	if len(t.races) == 0 {
		return false
	}
	t.r.mu.Lock()
	defer t.r.mu.Unlock()
	for _, s := range t.races {
		if behind(s, at) {
			return true
		}
	}
	return false
}

// earlierLocked reports whether a branch of rc other than b finished, or
// may still finish (see mayFinishFirstLocked), before at, or at it and
// declared before b.
func (rc *race) earlierLocked(b int, at time.Time) bool {
	if rc.finishedEarlierLocked(b, at) {
		return true
	}
	for o := range rc.n {
		if o != b && !rc.ended[o] && !rc.finished(o) && rc.mayFinishFirstLocked(o, b, at) {
			return true
		}
	}
	return false
}

// finishedEarlierLocked reports whether a branch of rc other than b
// finished before at, or at it and declared before b.
func (rc *race) finishedEarlierLocked(b int, at time.Time) bool {
	for _, cd := range rc.cands {
		if cd.branch != b && (cd.at.Before(at) || cd.at.Equal(at) && cd.branch < b) {
			return true
		}
	}
	return false
}

// outrunLocked reports whether a receive of the slot's branch that ranks a
// message that was there when it began at at, its thread's time, must
// take nothing for now: the branch lost, or the race is undecided, the
// branch does not hold messages taken (the holder wins whatever the
// times), and another branch finished before at, or at it and declared
// before (see finishedEarlierLocked), or may still (see
// mayRecordEarlierLocked).
func (s raceSlot) outrunLocked(at time.Time) bool {
	rc := s.r
	if s.lostLocked() {
		// Lost since the receive looked (see thread.lostARace): it
		// takes nothing.
		return true
	}
	if rc.decided || rc.claim == s.b && rc.claimTaken {
		return false
	}
	if rc.finishedEarlierLocked(s.b, at) {
		return true
	}
	for o := range rc.n {
		if o != s.b && !rc.ended[o] && !rc.finished(o) && rc.mayRecordEarlierLocked(o, s.b, at) {
			return true
		}
	}
	return false
}

// mayRecordEarlierLocked is mayFinishFirstLocked for a receive of w's (see
// outrunLocked) but for a tie: a thread of b at work in the workflow's own
// code (a step has no floor) whose floor is at, not before, and that has
// begun no primitive in the race yet (see thread.primed) does not count,
// though b declared before w. Tests make branches wait for each other on
// Go channels at a race's start, to force an order (rule 3 of the package
// doc forbids it in a workflow): counted, such a branch would make the
// receive wait for ever for a branch that waits for it. A thread at work
// that began a primitive (it may return at its floor, a branch's finish),
// one that replays, and one that waits with a floor (a deadline, a
// finisher held at its time) count at at too.
func (rc *race) mayRecordEarlierLocked(b, w int, at time.Time) bool {
	for _, th := range rc.threads {
		if th.b != b || !th.t.hasFloor {
			continue
		}
		if th.t.floor.Before(at) {
			return true
		}
		if wf := &th.t.waitFor; th.t.floor.Equal(at) && b < w && (th.t.primedIn(rc) || !rc.live[b] || wf.hasFloor || !wf.at.IsZero()) {
			return true
		}
	}
	return false
}

// primedIn reports whether t, or the thread it branched from, began a
// primitive under rc (see thread.primed).
func (t *thread) primedIn(rc *race) bool {
	for _, s := range t.races[:t.primed] {
		if s.r == rc {
			return true
		}
	}
	return false
}

// awaitOutrun waits, for a receive of t's at at that took nothing because
// a race outran it (see outrunLocked), until none does.
func (t *thread) awaitOutrun(at time.Time) error {
	return t.awaitRanked(at, raceSlot.outrunLocked)
}

// candAt returns the time at which branch b finished, if it has.
func (rc *race) candAt(b int) (time.Time, bool) {
	for _, cd := range rc.cands {
		if cd.branch == b {
			return cd.at, true
		}
	}
	return time.Time{}, false
}

// finished reports whether branch b finished (returned a value).
func (rc *race) finished(b int) bool {
	_, ok := rc.candAt(b)
	return ok
}

// setFloorLocked sets the earliest workflow time t may still record
// (none: not before now), for the races it runs under.
func (t *thread) setFloorLocked(at time.Time, ok bool) {
	if len(t.races) == 0 || (t.hasFloor == ok && t.floor.Equal(at)) {
		return
	}
	t.floor, t.hasFloor = at, ok
	for _, s := range t.races {
		if s.r.holding > 0 {
			s.r.signalLocked()
		}
	}
}

// enterRacesLocked registers t under the races it runs under, as their branch.
func (t *thread) enterRacesLocked() {
	for _, s := range t.races {
		s.r.threads = append(s.r.threads, raceThread{t: t, b: s.b})
	}
}

// leaveRacesLocked unregisters t, which exited.
func (t *thread) leaveRacesLocked() {
	for _, s := range t.races {
		for i, th := range s.r.threads {
			if th.t == t {
				s.r.threads = append(s.r.threads[:i], s.r.threads[i+1:]...)
				break
			}
		}
		if s.r.holding > 0 {
			s.r.signalLocked()
		}
	}
}

// raceEnd records that branch b stopped without a value: failed (counted
// towards "every branch failed") or cancelled.
func (r *run) raceEnd(rc *race, b int, failed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rc.liveLocked(b)
	rc.ended[b] = true
	if rc.claim == b {
		// In the first run, a branch took messages only once the
		// holder before it had ended: a replayed branch that holds
		// messages is the holder that came next (or one that ends in
		// its turn), and must not lose to a branch that finishes
		// meanwhile, as it would not have then.
		rc.handOverLocked(r.hist)
	}
	if failed {
		rc.failed++
		if rc.failed == rc.n && !rc.decided {
			rc.decideLocked(-1)
		}
	}
	rc.signalLocked()
}

// handOverLocked gives the claim its holder gave up to the first branch
// that has not ended and whose replayed history holds messages it has yet
// to complete (-1: none). One whose recorded messages were all completed
// since the race began holds none: in the first run it took them once the
// holder before it had ended and gave the claim up with their completion,
// so it holds the claim no more than it did then. (A completion that came
// while another branch held the claim dropped nothing; handed the claim
// then, a branch that completed its messages won, after a replay, a race
// that a branch finishing first had won in the first run.)
func (rc *race) handOverLocked(h *History) {
	rc.claim = -1
	for i, held := range rc.holds {
		if !held || rc.ended[i] {
			continue
		}
		if holdsMessagesNow(h, joinPath(rc.path, rc.names[i])) {
			rc.claim, rc.claimTaken = i, true
			return
		}
		// Passed over, it is no next holder: doomLocked must not spare
		// it (a step of it holding the actor's turn would keep the
		// next taker, and the decision, waiting until its timeout).
		rc.holds[i] = false
	}
}

// noClaims is claim's release for a thread under no race.
var noClaims = func([]HistoryWrite) {}

// claim takes, for each race t runs under, the right to take messages for
// t's branch, waiting while another branch holds it (but not past deadline,
// if set: then it returns nil and no error). The returned func applies
// took, the durable batch that recorded the messages taken, to the run's
// history, and keeps the rights; with took nil it gives back those this
// call took. A thread under no race has no rights to take: its release
// does nothing, and the caller applies took itself (a func of its own,
// capturing t, would cost every receive an allocation).
func (t *thread) claim(deadline time.Time) (func(took []HistoryWrite), error) {
	if len(t.races) == 0 {
		return noClaims, nil
	}
	r := t.r
	// waited: the floor is the claim's wait's (see below), put back to
	// now once it is done waiting; not between its waits, or two claims
	// waiting on one race would wake each other.
	waited := false
	defer func() {
		if waited {
			t.setFloor(t.now, true)
		}
	}()
	for {
		r.mu.Lock()
		var taken []raceSlot
		var busy *race
		lost := false
		for _, s := range t.races {
			switch {
			case s.r.decided || s.r.doomed[s.b]:
				// A thread still running under a decided race is a loser.
				lost = true
			case s.r.claim < 0:
				s.r.claim, s.r.claimTaken = s.b, false
				taken = append(taken, s)
				continue
			case s.r.claim == s.b:
				continue
			default:
				busy = s.r
			}
			break
		}
		if !lost && busy == nil {
			for _, s := range t.races {
				s.r.taking[s.b]++
			}
			r.mu.Unlock()
			return func(took []HistoryWrite) {
				r.mu.Lock()
				defer r.mu.Unlock()
				for _, s := range t.races {
					s.r.taking[s.b]--
				}
				if took != nil {
					// Applied with the claim taken, under one lock: a
					// sibling's completion sees these messages held.
					r.hist.Apply(took)
					t.pending = nil
					for _, s := range t.races {
						// Dropped since this look, when the branch held
						// no other message (a sibling's completion that
						// came before the look): it holds these.
						if s.r.claim == s.b || s.r.claim < 0 && !s.r.decided && !s.r.doomed[s.b] {
							s.r.claim, s.r.claimTaken = s.b, true
						}
					}
				} else {
					for _, s := range taken {
						// Kept if a sibling took messages with it meanwhile.
						if s.r.claim == s.b && !s.r.claimTaken {
							s.r.claim = -1
							s.r.signalLocked()
						}
					}
				}
				// A sibling's completion may have found the branch
				// taking, and left its claim for this release.
				t.dropClaimsLocked()
			}, nil
		}
		for _, s := range taken {
			s.r.claim = -1
		}
		if lost {
			r.mu.Unlock()
			return nil, ErrCancelled
		}
		if !deadline.IsZero() && !r.now().Before(deadline) {
			r.mu.Unlock()
			return nil, nil
		}
		// The floor the wait has is set here, before the change it
		// waits for is read, and kept by the wait (keepFloor): set by
		// the wait, it would signal the race (when a thread waits on its
		// floors), closing the very change this wait is for, and the
		// claim would spin until the race moved on.
		t.setFloorLocked(deadline, !deadline.IsZero())
		ch := busy.changed
		r.mu.Unlock()
		waited = true
		if err := t.wait(waitFor{change: ch, at: deadline, reason: WakeReceive, keepFloor: true}); err != nil {
			return nil, err
		}
	}
}

// dropClaimsLocked gives up the claim that t's branch holds, in each race
// t runs under, for messages taken, if the branch now holds none (see
// holdsMessagesNow): they went back to their queues with a nested race's
// losers, or were completed. A replay finds the same (holdsMessages, of
// the history it starts with, as the race begins); kept, the claim would
// win the branch a race it may lose on replay, and a branch that finished
// first would wait for it for good (a branch looping over a receive that
// completes each message, raced against a timer). A branch that holds
// messages, replayed, takes it over (see raceEnd), and the race's
// finishers look again.
func (t *thread) dropClaimsLocked() {
	for _, s := range t.races {
		if o := s.r; o.claim == s.b && o.claimTaken && !o.decided && o.taking[s.b] == 0 && !holdsMessagesNow(t.r.hist, joinPath(o.path, o.names[s.b])) {
			o.holds[s.b] = false
			o.handOverLocked(t.r.hist)
			o.signalLocked()
		}
	}
}

// claimReplayed takes the message rights of a replayed receive that holds
// messages not all completed (see tookMessages), without waiting: the
// messages were taken in the first run, so the branch holds the right
// unless another branch took it first in this replay.
func (t *thread) claimReplayed() {
	if len(t.races) == 0 {
		return
	}
	t.r.mu.Lock()
	defer t.r.mu.Unlock()
	for _, s := range t.races {
		if s.r.claim < 0 && !s.r.decided {
			s.r.claim = s.b
		}
		if s.r.claim == s.b {
			s.r.claimTaken = true
		}
	}
}

// endedAtWork notes that t, a join or race branch, ended with err: if the
// run was stopped first, and err is not the stop's (t returned a value or
// failed, at work), a race's finisher that waits on t's floor, or did
// when the stop came, would have gone on at once, so the run must be
// woken at once. Its finish is lost with the run, and the wait of a
// sibling would otherwise say when it comes back. (A branch that ended
// with ErrEvicted said what it waited for, or that it was at work.)
func (t *thread) endedAtWork(err error) {
	if len(t.races) == 0 || err != nil && isControl(err) {
		return
	}
	r := t.r
	r.mu.Lock()
	if r.ctx.Err() != nil && t.holdsARaceLocked() {
		r.yieldNow = true
	}
	r.mu.Unlock()
}
