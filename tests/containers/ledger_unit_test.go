//go:build containers

package containers

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jetrl/jetrl/proto"
)

// fakeLedger builds a ledger by hand, as readLedger would from the streams.
type fakeLedger struct {
	l   *ledger
	seq uint64
}

func newFakeLedger() *fakeLedger {
	return &fakeLedger{l: &ledger{eps: map[string]*epRec{}, groups: map[string][]*epRec{}, train: map[string]*trainRec{}, batchOf: map[string]batchRef{}}}
}

// group publishes n members of a group of size 8 admitted at version start; the first infra of them failed.
func (f *fakeLedger) group(id string, n, infra int, start int64) []string {
	var ids []string
	for k := 0; k < n; k++ {
		f.seq++
		r := &epRec{id: fmt.Sprintf("%s-%d", id, k), group: id, groupSize: 8, infra: k < infra, startVersion: start, seq: f.seq, at: time.Unix(int64(f.seq), 0)}
		f.l.eps[r.id] = r
		f.l.order = append(f.l.order, r)
		f.l.groups[id] = append(f.l.groups[id], r)
		ids = append(ids, r.id)
	}
	return ids
}

// batch releases episodes at trainer version v as train batch id.
func (f *fakeLedger) batch(id string, v int64, ids ...string) {
	f.l.train[id] = &trainRec{id: id, episodes: ids}
	f.l.trainOrder = append(f.l.trainOrder, id)
	for _, e := range ids {
		f.l.batchOf[f.l.eps[e].group] = batchRef{version: v, at: time.Now()}
	}
}

func (f *fakeLedger) applied(batch string, episodes int) {
	f.l.steps = append(f.l.steps, proto.TrainStep{Version: int64(len(f.l.steps) + 1), BatchID: batch, Episodes: episodes})
}

func (f *fakeLedger) fates() map[string]int {
	out := map[string]int{}
	for _, r := range f.l.order {
		out[r.fate]++
	}
	return out
}

func TestLedgerFates(t *testing.T) {
	f := newFakeLedger()
	a := f.group("a", 8, 0, 0)
	b := f.group("b", 8, 3, 0) // 3 masked, 5 trained
	f.group("c", 8, 7, 0)      // 7 masked, 1 left: a small group, never batched
	f.group("d", 8, 0, 0)      // admitted at 0, never batched, and the trainer is at 5 at the end: stale
	f.batch("t1", 0, append(a, b[3:]...)...)
	f.applied("t1", 13)
	f.batch("t2", 1, f.group("e", 8, 0, 1)...)
	f.applied("t2", 8)
	f.batch("t3", 2, f.group("h", 8, 0, 2)...)
	f.applied("t3", 8)
	f.batch("t4", 3, f.group("i", 8, 0, 3)...)
	f.applied("t4", 8)
	// Released at 2 (fresh then), applied as version 5 (trained at 4): the trainer drops it as stale.
	f.batch("t5", 2, f.group("g", 8, 0, 0)...)
	f.applied("t5", 0)
	f.l.ackFloor = f.seq
	f.group("p", 8, 0, 4) // a complete fresh group the replay-buffer still holds
	f.l.numAckPending = 8
	f.l.settle()
	if len(f.l.problems) != 0 {
		t.Fatalf("problems: %v", f.l.problems)
	}
	got := f.fates()
	want := map[string]int{fateTrained: 13 + 8 + 8 + 8, fateMasked: 3 + 7, fateSmall: 1, fateStale: 8 + 8, fatePending: 8, fateLost: 0}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %d, want %d (all: %v)", k, got[k], v, got)
		}
	}
	rows := f.l.rows([]window{{fault: "none", from: time.Unix(0, 0)}})
	if all := rows[len(rows)-1]; all.Produced != len(f.l.order) || all.Trained != 37 || all.Lost != 0 || all.Duplicated != 0 {
		t.Errorf("total row %+v", all)
	}
}

func TestLedgerFindsLossAndDuplicates(t *testing.T) {
	cases := []struct {
		name  string
		build func(f *fakeLedger)
		want  string
	}{
		{"episode acked but never batched", func(f *fakeLedger) {
			f.group("a", 8, 0, 0)
			f.l.ackFloor = f.seq
		}, "acked by the replay-buffer"},
		{"more unexplained episodes than the replay-buffer holds", func(f *fakeLedger) {
			f.group("a", 8, 0, 0)
			f.l.numAckPending = 7
		}, "holds only 7"},
		{"batch applied twice", func(f *fakeLedger) {
			f.batch("t1", 0, f.group("a", 8, 0, 0)...)
			f.applied("t1", 8)
			f.applied("t1", 0)
		}, "applied twice"},
		{"episode in two batches", func(f *fakeLedger) {
			a := f.group("a", 8, 0, 0)
			f.batch("t1", 0, a...)
			f.batch("t2", 1, a[:2]...)
			f.applied("t1", 8)
			f.applied("t2", 0)
		}, "in 2 train batches"},
		{"trained count differs from the trainer's", func(f *fakeLedger) {
			f.batch("t1", 0, f.group("a", 8, 0, 0)...)
			f.applied("t1", 7)
		}, "the trainer reports 7"},
		{"version gap", func(f *fakeLedger) {
			f.batch("t1", 0, f.group("a", 8, 0, 0)...)
			f.l.steps = append(f.l.steps, proto.TrainStep{Version: 2, BatchID: "t1", Episodes: 8})
		}, "versions must run"},
		{"train batch never applied", func(f *fakeLedger) {
			f.batch("t1", 0, f.group("a", 8, 0, 0)...)
			f.l.ackFloor = f.seq
		}, "never applied"},
		{"episode missing from the episodes stream", func(f *fakeLedger) {
			f.batch("t1", 0, f.group("a", 8, 0, 0)...)
			f.l.train["t1"].episodes = append(f.l.train["t1"].episodes, "ghost")
			f.applied("t1", 8)
		}, "does not hold"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeLedger()
			tc.build(f)
			f.l.settle()
			if !strings.Contains(strings.Join(f.l.problems, "\n"), tc.want) {
				t.Fatalf("problems %q, want one with %q", f.l.problems, tc.want)
			}
		})
	}
}
