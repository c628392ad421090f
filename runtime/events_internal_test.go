package runtime

import "testing"

// chainTops keeps one innermost turn per chain: set replaces a chain's,
// del removes only the chain named, and the others keep theirs.
func TestChainTopsByChain(t *testing.T) {
	var c chainTops
	t1, t2, t3 := &turnEvents{}, &turnEvents{}, &turnEvents{}
	c.set("a", t1)
	c.set("b", t2)
	if c.get("a") != t1 || c.get("b") != t2 || c.get("c") != nil {
		t.Fatal("get after two sets")
	}
	c.set("a", t3)
	if c.get("a") != t3 || len(c) != 2 {
		t.Fatalf("a chain set twice: %v entries", len(c))
	}
	c.del("a")
	if c.get("a") != nil || c.get("b") != t2 || len(c) != 1 {
		t.Fatal("del removed the wrong chain")
	}
	c.del("x")
	c.del("b")
	if len(c) != 0 || c.get("b") != nil {
		t.Fatal("not empty after deleting every chain")
	}
}
