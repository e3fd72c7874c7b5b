package replaybuffer_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jetrl/jetrl/proto"
	replaybuffer "github.com/jetrl/jetrl/services/replay-buffer"
)

// A group still playing when the last batch that can take it is composed trains with the members that
// arrived once they are Cut of the group; otherwise it waits, and goes stale whole at the next version.
func TestGroupIsCutAtItsLastBatch(t *testing.T) {
	for _, tc := range []struct {
		name string
		cut  float64
		want []string // the first batch
	}{
		{"off", 0, []string{"whole-0", "whole-1", "whole-2", "whole-3"}},
		{"three of four arrived, cut at 0.75", 0.75, []string{"open-0", "open-1", "open-2", "whole-0", "whole-1", "whole-2", "whole-3"}},
		{"three of four arrived, cut at 1", 1, []string{"whole-0", "whole-1", "whole-2", "whole-3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMesh(t)
			r := m.startBuffer(t, replaybuffer.Config{BatchSize: 4, MaxBatchSize: 8, Eta: 0, GroupTimeout: time.Minute, Cut: tc.cut})
			for k := range 4 {
				m.publish(t, ep("whole", k, 4, 0), "")
			}
			for k := range 3 {
				m.publish(t, ep("open", k, 4, 0), "")
			}
			eventually(t, 10*time.Second, "7 episodes received", func() bool { return r.b.Stats().Received == 7 })
			m.setVersion(t, 0) // the batch for version 0 is the last that can take either group (eta 0)
			eventually(t, 10*time.Second, "a batch", func() bool { return m.msgs(t, proto.StreamBatches) == 1 })
			got := ids(m.batch(t, 1))
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("batch holds %v, want %v", got, tc.want)
			}
			// The last member arrives after the batch, at version 1.
			m.setVersion(t, 1)
			eventually(t, 10*time.Second, "version 1 seen", func() bool { return r.b.Version() == 1 })
			m.publish(t, ep("open", 3, 4, 0), "")
			cut := len(tc.want) == 7
			eventually(t, 10*time.Second, "every admission of the open group given back", func() bool {
				if cut {
					return m.refunded(t) == 1 // only the member cut
				}
				return m.refunded(t) == 4 // the whole group went stale
			})
			eventually(t, 5*time.Second, "the counts", func() bool {
				s := r.b.Stats()
				if cut {
					return s.Cut == 1 && s.Late == 1 && s.DroppedStale == 0 && s.Missing == 0 && s.Batched == 7
				}
				return s.Cut == 0 && s.Late == 0 && s.DroppedStale == 4 && s.Batched == 4
			})
			if n := m.msgs(t, proto.StreamBatches); n != 1 {
				t.Fatalf("%d batches, want 1", n)
			}
			eventually(t, 10*time.Second, "every episode acked", func() bool { return m.pending(t) == 0 })
		})
	}
}

func TestCutValidated(t *testing.T) {
	for _, c := range []float64{-0.1, 1.5} {
		_, err := replaybuffer.New(replaybuffer.Config{Cut: c}, replaybuffer.Deps{})
		if err == nil || !strings.Contains(err.Error(), "cut") {
			t.Fatalf("cut %v: error %v, want one about the cut", c, err)
		}
	}
}
