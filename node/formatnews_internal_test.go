package node

import (
	"testing"

	"github.com/rivet-go/rivet/runtime"
)

// Every storage format from 3 on, up to this build's, has its words for
// the logs (formatNews): a format added without them would log its gate's
// waits and its downgrade error with blanks where what it changes goes.
func TestEveryStorageFormatHasItsNews(t *testing.T) {
	for f := 3; f <= runtime.StorageFormat; f++ {
		n := formatNews[f]
		for _, w := range []struct{ name, text string }{
			{"cluster", n.cluster}, {"older", n.older}, {"waiting", n.waiting}, {"on", n.on},
		} {
			if w.text == "" {
				t.Errorf("formatNews[%d].%s is empty: say what storage format %d changes", f, w.name, f)
			}
		}
	}
}
