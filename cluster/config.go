package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/hashicorp/memberlist"
	"go.uber.org/zap"
)

// DefaultBindAddr is the gossip address of a node that is given none:
// loopback, so that a node started without flags never exposes an
// unencrypted gossip port to the network.
const DefaultBindAddr = "127.0.0.1:7946"

// Config describes one member. The zero value of each field but NodeID
// takes the default written on it.
type Config struct {
	// NodeID is the member's name in gossip. Required. It must be unique in
	// the cluster and should be stable across restarts: a restarted member
	// with the same ID and address replaces its previous run at once, while
	// a new ID is a new member (and the old one lingers until declared
	// dead).
	NodeID string

	// BindAddr is the host:port this member listens on, TCP and UDP on the
	// same port. Empty: DefaultBindAddr. Port 0 picks a free port (tests);
	// GossipAddr then tells which. A host name is resolved once, at Start.
	BindAddr string

	// AdvertiseAddr is the host:port the other members dial. Empty: the
	// bound address. It must be given when BindAddr's host is unspecified
	// (0.0.0.0 or ::), since no one can dial that. A missing or zero port
	// means the bound port.
	AdvertiseAddr string

	// Join lists the addresses (host:port, or host with the default port of
	// this member's own bind port) of members to join through. Start does
	// not wait for them: a background joiner retries with backoff until one
	// answers, because seeds may start after us. This member's own address
	// may be listed (every node can share one list); it is skipped. Empty:
	// this member starts a cluster of its own, and others join it.
	Join []string

	// GossipKey, if set, encrypts and authenticates all gossip with AES-GCM
	// and refuses members that do not share it. It must be 16, 24 or 32
	// bytes (AES-128, -192, -256). Without it, anyone who can reach the port
	// can join the cluster and read its metadata.
	GossipKey []byte

	// Meta is this member's metadata, gossiped to all. UpdateMeta changes
	// it later.
	Meta Meta

	// Profile picks the failure-detection timings. Zero: ProfileLAN.
	Profile Profile

	// Logger receives this package's logs, and memberlist's under the name
	// "memberlist". Nil: no logs.
	Logger *zap.Logger
}

// DefaultConfig returns the configuration of a member on DefaultBindAddr
// with LAN timings. NodeID must still be set.
func DefaultConfig() Config {
	return Config{BindAddr: DefaultBindAddr, Profile: ProfileLAN}
}

// DefaultLocalConfig is DefaultConfig on a free loopback port with the fast
// timings of ProfileLocal, for tests and single-host demos.
func DefaultLocalConfig() Config {
	c := DefaultConfig()
	c.BindAddr = "127.0.0.1:0"
	c.Profile = ProfileLocal
	return c
}

// Meta is what a member tells the others about itself, beyond its gossip
// address.
type Meta struct {
	// GRPCAddr is the address at which peers and clients call the node.
	GRPCAddr string `json:"grpc"`
	// HTTPAddr is where the member serves metrics and health, if anywhere.
	HTTPAddr string `json:"http,omitempty"`
}

// wireMeta is Meta as gossiped. Leaving is this package's own mark, set
// just before a graceful leave so that the others can tell it from a
// failure (memberlist's callbacks cannot). Embedding Meta keeps the JSON
// flat, so a future field of Meta needs no change here.
type wireMeta struct {
	Meta
	Leaving bool `json:"leaving,omitempty"`
}

// encodeMeta returns m's wire form, or ErrMetaTooLarge. It measures the form
// with the leaving mark, so that a Meta accepted now still fits when Leave
// adds the mark.
func encodeMeta(m Meta, leaving bool) ([]byte, error) {
	withMark, err := json.Marshal(wireMeta{Meta: m, Leaving: true})
	if err != nil {
		return nil, err
	}
	if len(withMark) > memberlist.MetaMaxSize {
		return nil, fmt.Errorf("%w: %d bytes encoded, at most %d", ErrMetaTooLarge, len(withMark), memberlist.MetaMaxSize)
	}
	if leaving {
		return withMark, nil
	}
	return json.Marshal(wireMeta{Meta: m})
}

// Profile is a set of failure-detection timings.
type Profile int

const (
	// ProfileLAN uses memberlist's DefaultLANConfig: a crashed member is
	// declared dead after about 6 s in a small cluster (measured: 5.8-6.8 s
	// with 3 members), with few false alarms on a busy network.
	ProfileLAN Profile = iota
	// ProfileLocal is for members on one host (tests, docker-compose): a
	// crashed member is declared dead after about 1 s (measured: 0.9-1.2 s
	// with 3 members, under the race detector). On a real network its short
	// probe timeout would declare slow members dead.
	ProfileLocal
)

func (p Profile) String() string {
	switch p {
	case ProfileLAN:
		return "lan"
	case ProfileLocal:
		return "local"
	default:
		return "Profile(" + strconv.Itoa(int(p)) + ")"
	}
}

// memberlistConfig returns memberlist's configuration for p, before the
// fields that Start sets from Config.
func (p Profile) memberlistConfig() *memberlist.Config {
	mc := memberlist.DefaultLANConfig()
	if p != ProfileLocal {
		return mc
	}
	// Time to declare a crash: the crashed member is probed within
	// (members-1) probe intervals, suspected after one more, and declared
	// dead when the suspicion times out: SuspicionMult probe intervals once
	// another member has confirmed the suspicion, up to
	// SuspicionMaxTimeoutMult times that without confirmation. With 3
	// members that is at most 0.4 + 0.2 + 0.6..1.8 s; about 1 s in practice,
	// as the third member confirms.
	mc.ProbeInterval = 200 * time.Millisecond
	// Loopback answers in microseconds; 100 ms leaves room for a loaded CI
	// machine under the race detector before a probe is called failed.
	mc.ProbeTimeout = 100 * time.Millisecond
	mc.SuspicionMult = 3
	mc.SuspicionMaxTimeoutMult = 3
	// Fast gossip spreads joins, leaves and meta updates within a few tens
	// of milliseconds; loopback bandwidth makes the extra packets free.
	mc.GossipInterval = 50 * time.Millisecond
	mc.RetransmitMult = 3
	// Push/pull is the anti-entropy that repairs lost gossip.
	mc.PushPullInterval = 2 * time.Second
	mc.TCPTimeout = time.Second
	mc.IndirectChecks = 1
	mc.GossipToTheDeadTime = 2 * time.Second
	return mc
}

// joinBackoff returns the first and the longest pause between join
// attempts. The longest bounds how late a member notices a seed that
// started after it.
func (p Profile) joinBackoff() (first, max time.Duration) {
	if p == ProfileLocal {
		return 50 * time.Millisecond, time.Second
	}
	return 500 * time.Millisecond, 10 * time.Second
}

// rebroadcastAfter is how long UpdateMeta waits for memberlist to confirm
// a metadata broadcast before it makes a new one. A confirmation takes a
// few gossip rounds (a few hundred ms on a LAN, tens with ProfileLocal), but
// memberlist v0.7.0 can lose it for good: its broadcast queue can overwrite
// one queued message with another of the same length (hashicorp/memberlist
// pull requests 263 and 323), and a refutation racing UpdateNode drops the
// update. A new broadcast has a new incarnation, which beats both.
func (p Profile) rebroadcastAfter() time.Duration {
	if p == ProfileLocal {
		return time.Second
	}
	return 5 * time.Second
}

// resolveTimeout bounds the name lookups of BindAddr and AdvertiseAddr at
// Start.
const resolveTimeout = 10 * time.Second

// settings is a validated Config with its addresses resolved.
type settings struct {
	Config
	bindIP   net.IP
	bindPort int
	// advIP and advPort are the advertised address; advPort 0 means the
	// bound port, known only after binding.
	advIP   net.IP
	advPort int
}

// validate fills defaults, resolves addresses and rejects what memberlist
// would reject later or, worse, accept and misbehave on (it binds all
// interfaces when given a host name, and panics on oversized meta).
func (cfg Config) validate() (settings, error) {
	s := settings{Config: cfg}
	if s.NodeID == "" {
		return s, fmt.Errorf("%w: NodeID is required", ErrInvalidConfig)
	}
	if s.BindAddr == "" {
		s.BindAddr = DefaultBindAddr
	}
	if s.Logger == nil {
		s.Logger = zap.NewNop()
	}
	if s.Profile != ProfileLAN && s.Profile != ProfileLocal {
		return s, fmt.Errorf("%w: unknown %v", ErrInvalidConfig, s.Profile)
	}
	if n := len(s.GossipKey); n != 0 && n != 16 && n != 24 && n != 32 {
		return s, fmt.Errorf("%w: GossipKey must be 16, 24 or 32 bytes, got %d", ErrInvalidConfig, n)
	}
	var err error
	if s.bindIP, s.bindPort, err = resolveHostPort(s.BindAddr, false); err != nil {
		return s, fmt.Errorf("%w: BindAddr: %w", ErrInvalidConfig, err)
	}
	switch {
	case s.AdvertiseAddr != "":
		if s.advIP, s.advPort, err = resolveHostPort(s.AdvertiseAddr, true); err != nil {
			return s, fmt.Errorf("%w: AdvertiseAddr: %w", ErrInvalidConfig, err)
		}
		if s.advIP.IsUnspecified() {
			return s, fmt.Errorf("%w: AdvertiseAddr %q is not an address others can dial", ErrInvalidConfig, s.AdvertiseAddr)
		}
	case s.bindIP.IsUnspecified():
		return s, fmt.Errorf("%w: BindAddr %q listens on all interfaces, so the address to tell other members cannot be guessed: set the gossip advertise address (--gossip-advertise-addr)", ErrInvalidConfig, s.BindAddr)
	default:
		s.advIP = s.bindIP
	}
	if _, err = encodeMeta(s.Meta, false); err != nil {
		return s, err
	}
	return s, nil
}

// resolveHostPort splits and resolves addr. An empty host is the
// unspecified address; portOptional accepts a bare host (port 0).
func resolveHostPort(addr string, portOptional bool) (net.IP, int, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		if !portOptional {
			return nil, 0, err
		}
		host, portStr = addr, "0"
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return nil, 0, fmt.Errorf("bad port in %q", addr)
	}
	if host == "" {
		return net.IPv4zero, int(port), nil
	}
	if ip := net.ParseIP(host); ip != nil {
		return ip, int(port), nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), resolveTimeout)
	defer cancel()
	ips, err := net.DefaultResolver.LookupIP(ctx, "ip", host)
	if err != nil {
		return nil, 0, err
	}
	// Prefer IPv4: a name like localhost resolves to both, and members
	// given the same name must agree on one.
	for _, ip := range ips {
		if ip4 := ip.To4(); ip4 != nil {
			return ip4, int(port), nil
		}
	}
	return ips[0], int(port), nil
}
