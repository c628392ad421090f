package workflow

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"unicode/utf8"
)

// History is the replay core: the recorded entries of one workflow, which of
// them the current run has visited, and the checks that turn a mismatch
// between code and history into a *DivergenceError. It does no I/O, reads no
// clock and starts no goroutine; it is not safe for concurrent use (the
// driver guards it with one mutex).
//
// Entries are immutable once stored: Apply replaces them, so a pointer
// returned by Get or Visit stays valid and unchanging.
type History struct {
	entries map[string]*Entry
	// order lists the loaded entries of each scope by Seq, with a cursor
	// past those already visited: replay visits them in that order.
	order map[string]*scopeOrder
	// loaded holds the paths of the entries the run started with, sorted.
	// Only they can be unvisited: entries written during the run are
	// visited by the act of writing them.
	loaded    []string
	unvisited map[string]struct{}
	// tries holds the try blocks whose place the entries recorded in them
	// tell (Entry.TryPlaces), by path: entries of kind KindTry that stand
	// in their scope's order, and in unvisited until the code reaches the
	// block, but are none of the history's entries.
	tries map[string]*Entry
	// held holds the paths of the entries that hold a race's claim
	// (tookMessages), kept as they are written: a completion under a race
	// looks through them, not through every entry (a loop of completed
	// receives, raced, would be quadratic in its length).
	held map[string]struct{}
}

// NewHistory returns the replay state of entries. It fails if two entries
// share a path or a path is malformed.
func NewHistory(entries []Entry) (*History, error) {
	h := &History{entries: make(map[string]*Entry, len(entries)), unvisited: make(map[string]struct{}, len(entries)), order: map[string]*scopeOrder{}}
	for i := range entries {
		e := entries[i].clone()
		if err := validPath(e.Path); err != nil {
			return nil, err
		}
		if _, dup := h.entries[e.Path]; dup {
			return nil, fmt.Errorf("%w: history holds two entries at %q", ErrInvalid, e.Path)
		}
		h.entries[e.Path] = e
		h.noteHeld(e.Path, e)
		h.unvisited[e.Path] = struct{}{}
		h.loaded = append(h.loaded, e.Path)
		if e.Seq > 0 {
			sc := ParentOf(e.Path)
			o := h.order[sc]
			if o == nil {
				o = &scopeOrder{}
				h.order[sc] = o
			}
			o.entries = append(o.entries, e)
		}
	}
	sort.Strings(h.loaded)
	for _, p := range h.loaded {
		h.addTries(h.entries[p])
	}
	for _, o := range h.order {
		sort.SliceStable(o.entries, func(i, j int) bool { return o.entries[i].Seq < o.entries[j].Seq })
	}
	return h, nil
}

// addTries adds the try blocks that hold e, with the places e records
// for them, to the scopes' order. A block whose entries record different
// places (which a replay of the code that recorded them does not do)
// keeps the lowest.
func (h *History) addTries(e *Entry) {
	block := e.Path
	for _, place := range e.TryPlaces {
		block = ParentOf(block)
		if block == "" || place <= 0 || h.entries[block] != nil || IsIteration(block) {
			// Not a try block: a malformed record, or the block retired
			// with Removed, whose placeholder stands at its path.
			return
		}
		if t := h.tries[block]; t != nil {
			if place < t.Seq {
				t.Seq = place
			}
			continue
		}
		if h.tries == nil {
			h.tries = map[string]*Entry{}
		}
		t := &Entry{Path: block, Seq: place, Kind: KindTry}
		h.tries[block] = t
		h.unvisited[block] = struct{}{}
		sc := ParentOf(block)
		o := h.order[sc]
		if o == nil {
			o = &scopeOrder{}
			h.order[sc] = o
		}
		o.entries = append(o.entries, t)
	}
}

// VisitTry marks the try block at path visited and returns the place its
// entries record for it (0 if they record none), and whether the
// history holds entries in it. If the code reached the block before an
// entry its scope recorded earlier, it returns a *DivergenceError.
func (h *History) VisitTry(path string) (int, bool, error) {
	if t := h.tries[path]; t != nil {
		if err := h.checkOrder(t); err != nil {
			return 0, true, err
		}
		delete(h.unvisited, path)
		return t.Seq, true, nil
	}
	i := sort.SearchStrings(h.loaded, path+"/")
	return 0, i < len(h.loaded) && strings.HasPrefix(h.loaded[i], path+"/"), nil
}

// scopeOrder is the recorded order of one scope's entries.
type scopeOrder struct {
	entries []*Entry // by Seq
	next    int      // entries before it are visited
}

// ParentOf returns the scope that holds path ("" for the root).
func ParentOf(path string) string {
	if i := strings.LastIndexByte(path, '/'); i >= 0 {
		return path[:i]
	}
	return ""
}

// Get returns the entry at path, or nil.
func (h *History) Get(path string) *Entry { return h.entries[path] }

// Visit marks path visited and returns its entry (nil if there is none). If
// the entry is of another kind than the code asks for, or the code reached
// it before an entry its scope recorded earlier, it returns a
// *DivergenceError. kind "" accepts any kind.
func (h *History) Visit(path string, kind Kind) (*Entry, error) {
	e := h.entries[path]
	if e == nil {
		return nil, nil
	}
	if err := h.checkOrder(e); err != nil {
		return nil, err
	}
	delete(h.unvisited, path)
	if kind != "" && e.Kind != kind {
		return nil, &DivergenceError{Path: path, Expected: describe(e), Found: string(kind)}
	}
	return e, nil
}

// checkOrder reports a recorded entry of e's scope that was recorded before
// e and is not visited yet: the code skipped it, or swapped it with e.
func (h *History) checkOrder(e *Entry) error {
	o := h.order[ParentOf(e.Path)]
	if o == nil || e.Seq == 0 {
		return nil
	}
	for o.next < len(o.entries) {
		if _, ok := h.unvisited[o.entries[o.next].Path]; ok {
			break
		}
		o.next++
	}
	for _, first := range o.entries[o.next:] {
		if _, ok := h.unvisited[first.Path]; !ok {
			continue
		}
		if first.Seq >= e.Seq || first.Path == e.Path {
			break // by Seq: none after it is before e
		}
		// Asked only here, where it is rare: a try block's costs a walk
		// of the history's blocks.
		if !h.skippable(first.Path) {
			return h.diverged(first.Path, describe(first)+" before "+describe(e), fmt.Sprintf("%q first", e.Path))
		}
	}
	return nil
}

// oldPathGate reports whether path is a version gate that took the old
// path (version 1) and so may go unvisited: code from before the gate,
// which does what the old path does without asking, replays a history
// that code with the gate recorded (a deploy rolled back, or a node not
// yet upgraded in a rolling upgrade, which an instance in flight moves to).
// Code with the gate visits it and takes the old path again. Temporal
// records nothing for its default version, for the same reason. A gate
// retired with Removed is no different: an instance that took its old
// path runs the new one afterwards either way, which is why a gate is
// retired only once no such instance is left.
func (h *History) oldPathGate(path string) bool {
	e := h.entries[path]
	return e != nil && e.Kind == KindVersionCheck && e.Version == 1
}

// skippable reports whether the code may leave the unvisited entry (or
// try block) at path unreached: an old-path gate, or a try block that
// holds nothing else unreached (a block new with its gate, which an
// instance in flight recorded on its old path).
func (h *History) skippable(path string) bool {
	if h.oldPathGate(path) {
		return true
	}
	if h.entries[path] != nil || h.tries[path] == nil {
		return false
	}
	for _, p := range h.inTree(path) {
		if _, ok := h.unvisited[p]; ok && p != path && !h.oldPathGate(p) {
			return false
		}
	}
	for p := range h.tries {
		if _, ok := h.unvisited[p]; ok && p != path && Under(p, path) && !h.skippable(p) {
			return false
		}
	}
	return true
}

// diverged is the *DivergenceError for an entry at path that the code
// did not reach (found is what it did instead).
func (h *History) diverged(path, expected, found string) *DivergenceError {
	d := &DivergenceError{Path: path, Expected: expected, Found: found}
	if e := h.entries[path]; e != nil && e.Kind == KindVersionCheck {
		d.Gate = e.Version
	}
	return d
}

// PlaceBefore returns the place (Seq) of the first entry of scope, in
// recorded order, that the run has not reached yet, if there is one.
// An entry the code makes before it (a version gate or a Removed
// placeholder that a workflow in flight records as it replays under new
// code) takes that place, not the next one the scope counts: with a
// place after it, a later replay, which reaches the new entry first,
// would find it recorded after the one it stands before and diverge
// (the second of two gates put before a recorded step did).
func (h *History) PlaceBefore(scope string) (int, bool) {
	o := h.order[scope]
	if o == nil {
		return 0, false
	}
	for ; o.next < len(o.entries); o.next++ {
		if _, ok := h.unvisited[o.entries[o.next].Path]; ok {
			break
		}
	}
	// Past the entries the code may leave unreached: code that does not
	// reach them puts a new gate (or block) before what it does reach
	// next, not before them, which would place it before entries it
	// reached already.
	for _, e := range o.entries[o.next:] {
		if _, ok := h.unvisited[e.Path]; ok && !h.skippable(e.Path) {
			return e.Seq, true
		}
	}
	return 0, false
}

// VisitTree marks the entry at tree and everything under it visited: a
// completed scope whose body is not re-run.
func (h *History) VisitTree(tree string) {
	if len(h.unvisited) == 0 {
		return
	}
	for _, p := range h.inTree(tree) {
		delete(h.unvisited, p)
	}
	for p := range h.tries {
		if Under(p, tree) {
			delete(h.unvisited, p)
		}
	}
}

// VisitIterationsBefore marks the iterations of loop before n visited: a
// loop resumes at its recorded iteration and does not re-run earlier ones.
func (h *History) VisitIterationsBefore(loop string, n int) {
	if len(h.unvisited) == 0 {
		return
	}
	for _, p := range h.inTree(loop) {
		if i, ok := iterationIn(loop, p); ok && i < n {
			delete(h.unvisited, p)
		}
	}
	for p := range h.tries {
		if i, ok := iterationIn(loop, p); ok && i < n {
			delete(h.unvisited, p)
		}
	}
}

// LastIteration returns the highest iteration of loop that holds recorded
// entries, or -1 if none does.
func (h *History) LastIteration(loop string) int {
	last := -1
	for _, p := range h.inTree(loop) {
		if i, ok := iterationIn(loop, p); ok && i > last {
			last = i
		}
	}
	return last
}

// iterationIn returns the iteration of loop that path p is in, if any.
func iterationIn(loop, p string) (int, bool) {
	rest, ok := strings.CutPrefix(p, loop+"/~")
	if !ok {
		return 0, false
	}
	seg, _, _ := strings.Cut(rest, "/")
	i, err := strconv.Atoi(seg)
	return i, err == nil
}

// FirstUnvisited returns the first unvisited entry under scope ("" is the
// root: every entry), if any: the first of the scope's own entries in the
// order they were recorded (in a try block among them, the first of its
// entries), else the first in path order. A divergence names it as the
// entry the code missed, so it has to be the one a replay reaches next,
// not the one whose name sorts first (an inserted step named the last
// recorded step whose name sorted first, not the step it displaced).
func (h *History) FirstUnvisited(scope string) (string, bool) {
	if len(h.unvisited) == 0 {
		return "", false
	}
	if o := h.order[scope]; o != nil {
		// Entries before o.next are visited (checkOrder, PlaceBefore).
		for _, e := range o.entries[o.next:] {
			if _, ok := h.unvisited[e.Path]; !ok || h.oldPathGate(e.Path) {
				continue
			}
			if h.entries[e.Path] == nil { // a try block, which has no entry
				if p, ok := h.FirstUnvisited(e.Path); ok {
					return p, true
				}
				continue
			}
			return e.Path, true
		}
	}
	var candidates []string
	if scope == "" {
		candidates = h.loaded
	} else {
		candidates = h.inTree(scope)
	}
	for _, p := range candidates {
		if p == scope {
			continue
		}
		if _, ok := h.unvisited[p]; ok && !h.oldPathGate(p) {
			return p, true
		}
	}
	return "", false
}

// CheckNew returns a *DivergenceError if the code creates a new entry at
// path while its scope still holds unvisited recorded entries: entries of a
// scope are recorded in program order, so a deterministic replay reaches
// all of them before it runs anything new. This catches a renamed or
// inserted entry before its step runs, not only when the scope ends.
func (h *History) CheckNew(scope, path string, kind Kind) error {
	if p, ok := h.FirstUnvisited(scope); ok {
		return h.diverged(p, describe(h.entries[p])+" not yet replayed", fmt.Sprintf("new %s %q", kind, path))
	}
	return nil
}

// CheckEnd returns a *DivergenceError if scope ended (its body returned)
// with recorded entries it never reached: an entry was removed or renamed.
func (h *History) CheckEnd(scope string) error {
	if p, ok := h.FirstUnvisited(scope); ok {
		name := fmt.Sprintf("scope %q", scope)
		if scope == "" {
			name = "the workflow"
		}
		return h.diverged(p, describe(h.entries[p]), fmt.Sprintf("%s ended without reaching it", name))
	}
	return nil
}

// Apply applies writes in order. It keeps the entries it is given, not
// copies: an entry must not change once it is in a write (the engine builds
// a fresh one for every write, and code that changes an entry of the
// history clones it first). A copy of every entry written was the largest
// allocation of a workflow step in the engine.
func (h *History) Apply(writes []HistoryWrite) {
	for i := 0; i < len(writes); i++ {
		w := writes[i]
		if w.Put != nil {
			h.noteHeld(w.Put.Path, w.Put)
			h.entries[w.Put.Path] = w.Put
			delete(h.unvisited, w.Put.Path)
			continue
		}
		if w.DeleteTree == "" {
			continue // a requeue: the queues' business
		}
		// The tree deletes that follow (a loop's prune deletes an
		// iteration tree each) go in the same pass over the entries:
		// deletes commute, and a pass for each was most of a pruning
		// step's time.
		j := i + 1
		for j < len(writes) && writes[j].Put == nil && writes[j].DeleteTree != "" {
			j++
		}
		trees := writes[i:j]
		i = j - 1
		for p := range h.entries {
			if underAny(p, trees) {
				delete(h.held, p)
				delete(h.entries, p)
				delete(h.unvisited, p)
			}
		}
		for p := range h.tries {
			if underAny(p, trees) {
				delete(h.tries, p)
				delete(h.unvisited, p)
			}
		}
	}
}

// underAny reports whether path is under the tree one of ws deletes.
func underAny(path string, ws []HistoryWrite) bool {
	for _, w := range ws {
		if Under(path, w.DeleteTree) {
			return true
		}
	}
	return false
}

// noteHeld keeps held up to date as e is written at path.
func (h *History) noteHeld(path string, e *Entry) {
	switch {
	case tookMessages(e):
		if h.held == nil {
			h.held = map[string]struct{}{}
		}
		h.held[path] = struct{}{}
	case h.held != nil:
		delete(h.held, path)
	}
}

// takenUnder returns the messages that the receives at or under tree took
// and did not complete, by ID: what deleting tree would lose.
func (h *History) takenUnder(tree string) []RawMessage {
	var out []RawMessage
	for p, e := range h.entries {
		if e.Kind != KindMessage || !Under(p, tree) {
			continue
		}
		for _, m := range e.Messages {
			if !m.Completed {
				out = append(out, m.RawMessage)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Entries returns a copy of every entry, ordered by path.
func (h *History) Entries() []Entry {
	out := make([]Entry, 0, len(h.entries))
	for _, e := range h.entries {
		out = append(out, *e.clone())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// inTree returns the loaded paths equal to or under tree, in order.
func (h *History) inTree(tree string) []string {
	lo := sort.SearchStrings(h.loaded, tree)
	hi := lo
	for hi < len(h.loaded) && strings.HasPrefix(h.loaded[hi], tree) {
		hi++
	}
	var out []string
	for _, p := range h.loaded[lo:hi] {
		if Under(p, tree) {
			out = append(out, p)
		}
	}
	return out
}

func describe(e *Entry) string {
	if e == nil {
		return "nothing"
	}
	return fmt.Sprintf("%s %q", e.Kind, e.Path)
}

// scope tracks the names used in one scope of one run: the root, a loop
// iteration, a join or race branch, a try block.
type scope struct {
	// path is the scope's path once built is set (see pathOf): at init
	// for most scopes; a loop iteration's (made of loop and iter) only
	// with its first entry's path (claim), as that path's prefix, so that
	// the two are one allocation on every step in a loop.
	path  string
	built atomic.Bool
	loop  string
	iter  int
	// names are the names used so far; used holds them too once they are
	// many. Most scopes (a loop iteration, a branch) use a few names, for
	// which a map cost an allocation or two per scope and a search of
	// the slice costs less than hashing.
	names []string
	used  map[string]struct{}
	n     int       // names used
	buf   [2]string // names' first array
	// outer is, for a try block, the scope that holds it (a try block
	// has no entry: its entries stand in that scope's order); nil for
	// the others.
	outer *scope
	// tryPlaces is, for a try block whose place is known, what its
	// entries record in Entry.TryPlaces; nil for the others.
	tryPlaces []int
	// reached is the highest place (Seq) among the scope's recorded
	// entries this run has reached (reach): a new entry's place comes
	// after it. A build that counts places as the one that recorded
	// them never needs it; code from before a version gate does: the
	// gated build counted each of its gates (placed before the entry
	// they stand before) and numbered what it recorded after them
	// higher than this code counts, so this code's next entry, by its own
	// count, would take a place before entries it came after.
	reached int
	// shift is how far places have moved past names used (n), to come
	// after reached.
	shift int
}

// reach notes that the run reached a recorded entry of s at place seq.
func (s *scope) reach(seq int) {
	if seq > s.reached {
		s.reached = seq
	}
}

func newScope(path string) *scope {
	s := &scope{}
	s.init(path)
	return s
}

// init makes s the empty scope at path.
func (s *scope) init(path string) {
	s.path = path
	s.built.Store(true)
	s.names = s.buf[:0]
}

// pathOf returns s's path. A loop iteration's is built by its first claim
// (the goroutine whose primitive holds the scope's cx): until then it is
// made here, again on each call, as a stray primitive's error may read it
// meanwhile from another goroutine.
func (s *scope) pathOf() string {
	if s.built.Load() {
		return s.path
	}
	return iterationPath(s.loop, s.iter)
}

// pathIn returns the path of name in s.
func (s *scope) pathIn(name string) string {
	if s.built.Load() {
		return joinPath(s.path, name)
	}
	var num [20]byte
	p := s.loop + "/~" + string(strconv.AppendInt(num[:0], int64(s.iter), 10)) + "/" + name
	s.path = p[:len(p)-len(name)-1]
	s.built.Store(true)
	return p
}

// scopedCx is a cx and the scope it opens, allocated together: every loop
// iteration, join or race branch and try block makes one of each.
type scopedCx struct {
	x  cx
	sc scope
}

// newScopedCx returns a cx on thread t in a new scope at path.
func newScopedCx(t *thread, path string) *cx {
	s := &scopedCx{}
	s.sc.init(path)
	s.x.t, s.x.sc, s.x.self.x = t, &s.sc, &s.x
	return &s.x
}

// newIterationCx returns a cx on thread t in the scope of iteration i of
// the loop at path loop, its path not built yet (scope.pathIn).
func newIterationCx(t *thread, loop string, i int) *cx {
	s := &scopedCx{}
	s.sc.loop, s.sc.iter, s.sc.names = loop, i, s.sc.buf[:0]
	s.x.t, s.x.sc, s.x.self.x = t, &s.sc, &s.x
	return &s.x
}

// scopeMapAbove is the number of names past which a scope looks names up
// in a map.
const scopeMapAbove = 8

// claim returns the path of name in the scope and its place (Seq) among the
// names used so far, failing if the name was already used in this run of the
// scope: two entries with one name would share one record. kind is what
// claims it ("step", "sleep", ...), for that error.
func (s *scope) claim(kind, name string) (string, int, error) {
	if err := validName(name); err != nil {
		if sp := s.pathOf(); sp != "" {
			return "", 0, fmt.Errorf("%w, in %q", err, sp)
		}
		return "", 0, err
	}
	p := s.pathIn(name)
	var dup bool
	if s.used != nil {
		_, dup = s.used[name]
	} else {
		dup = slices.Contains(s.names, name)
	}
	if dup {
		return "", 0, &DivergenceError{Path: p, Expected: "one entry per name in a scope", Found: kind, Reused: true}
	}
	s.n++
	seq := s.n + s.shift
	if seq <= s.reached {
		s.shift += s.reached + 1 - seq
		seq = s.reached + 1
	}
	switch {
	case s.used != nil:
		s.used[name] = struct{}{}
	case s.n > scopeMapAbove:
		s.used = make(map[string]struct{}, 2*s.n)
		for _, n := range s.names {
			s.used[n] = struct{}{}
		}
		s.used[name] = struct{}{}
		s.names = nil
	default:
		s.names = append(s.names, name)
	}
	return p, seq, nil
}

// validName accepts the names users give entries and branches: a path
// segment that cannot be mistaken for a loop iteration.
func validName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty name (StepWith, StepOpts and DoOpts take theirs in StepOptions.Name)", ErrInvalid)
	case len(name) > 255:
		return fmt.Errorf("%w: name of %d bytes (at most 255): %.40q", ErrInvalid, len(name), name)
	case strings.ContainsRune(name, '/'):
		return fmt.Errorf("%w: name %q contains '/'", ErrInvalid, name)
	case strings.HasPrefix(name, "~"):
		return fmt.Errorf("%w: name %q starts with '~' (reserved for loop iterations)", ErrInvalid, name)
	case !utf8.ValidString(name):
		// Stored as JSON, its bad bytes come back as U+FFFD: the next
		// replay from storage (a retry, a restart, a move) diverged at
		// it, and no client could name it (a proto string is UTF-8).
		return fmt.Errorf("%w: name %q is not valid UTF-8", ErrInvalid, name)
	}
	return nil
}

func validPath(path string) error {
	if path == "" {
		return fmt.Errorf("%w: entry with an empty path", ErrInvalid)
	}
	for _, seg := range strings.Split(path, "/") {
		if seg == "" {
			return fmt.Errorf("%w: entry path %q has an empty segment", ErrInvalid, path)
		}
	}
	return nil
}

// decodeInto is json.Unmarshal that reports a recorded value the code
// cannot read as a *DecodeError naming path and v's type.
func decodeInto(path string, raw json.RawMessage, v any) error {
	if _, ok := v.(*none); ok {
		return nil // none reads any value, as its UnmarshalJSON does
	}
	if len(raw) == 0 {
		raw = json.RawMessage("null")
	}
	if err := json.Unmarshal(raw, v); err != nil {
		const max = 80
		s := string(raw)
		if len(s) > max {
			s = s[:max] + "..."
		}
		return &DecodeError{Path: path, Type: strings.TrimPrefix(fmt.Sprintf("%T", v), "*"), Value: s, Err: err}
	}
	return nil
}
