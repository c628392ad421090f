package cluster

import "strconv"

// State is a member's state as this member last heard it.
//
// There is no suspect state: memberlist v0.7.0 does not expose suspicion,
// so a member under suspicion is still StateAlive until declared dead.
type State string

const (
	// StateAlive is a member that answers probes, or whose failure is not
	// yet confirmed.
	StateAlive State = "alive"
	// StateDead is a member declared failed: it stopped answering probes
	// without announcing that it was leaving.
	StateDead State = "dead"
	// StateLeft is a member that announced it was leaving (Leave).
	StateLeft State = "left"
)

// Member is a snapshot of one member; it shares no memory with the Cluster.
type Member struct {
	// ID is the member's Config.NodeID.
	ID string
	// GossipAddr is the member's advertised gossip address (host:port).
	GossipAddr string
	// Meta is the member's latest metadata. It is zero if the member's
	// metadata could not be decoded (a member that is not a rivet node).
	Meta Meta
	// State is the member's state.
	State State
}

// EventKind says what happened to a member.
type EventKind int

const (
	// EventJoined: a member is alive that was unknown, dead or left. This
	// member's own start is the first event.
	EventJoined EventKind = iota + 1
	// EventUpdated: an alive member changed its Meta or its address.
	EventUpdated
	// EventLeft: a member is gone, either StateLeft or StateDead (see
	// Member.State).
	EventLeft
)

func (k EventKind) String() string {
	switch k {
	case EventJoined:
		return "joined"
	case EventUpdated:
		return "updated"
	case EventLeft:
		return "left"
	default:
		return "EventKind(" + strconv.Itoa(int(k)) + ")"
	}
}

// Event is one membership change, with the member as it was after it.
type Event struct {
	Kind   EventKind
	Member Member
}
