package node

import "testing"

// A node bound to every address tells others an HTTP address they can
// dial: its advertised host with the HTTP port ([::]:6421 is no address).
func TestTheAdvertisedHTTPAddressIsOneToDial(t *testing.T) {
	for _, c := range []struct{ bound, advertise, want string }{
		{"127.0.0.1:6421", "127.0.0.1:6420", "127.0.0.1:6421"},
		{"[::]:6421", "node1:6420", "node1:6421"},
		{"0.0.0.0:6421", "10.0.0.5:6420", "10.0.0.5:6421"},
		{"[::]:6421", "[fd00::5]:6420", "[fd00::5]:6421"},
		{"[::]:6421", "[::]:6420", "[::]:6421"}, // nothing better to say
		{"", "node1:6420", ""},                  // no HTTP listener
	} {
		if got := advertisedHTTP(c.bound, c.advertise); got != c.want {
			t.Errorf("advertisedHTTP(%q, %q) = %q, want %q", c.bound, c.advertise, got, c.want)
		}
	}
}
