package replaybuffer

import (
	"testing"
	"time"

	"github.com/jetrl/jetrl/proto"
)

// The pace learns the trainer's time per turn from the versions that name the batches it released, and
// expects the step on a batch to last that rate times the batch's turns, from the later of the last
// version and the batch's release.
func TestPaceExpectsTheStepEndFromTheTurnsInTheBatch(t *testing.T) {
	p := newPace()
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	p.applied(proto.PolicyVersion{Version: 0}, at(0))
	if _, ok := p.stepEnd(); ok {
		t.Fatal("a step end expected before any batch was released")
	}
	// Three steps of 100 turns: 200 ms, 300 ms (released 100 ms after its version: 200 ms from the release),
	// then 250 ms. Time per turn 2, 2 and 2.5 ms; the median is 2 ms.
	p.released("b1", at(0), 100)
	if p.complete() {
		t.Fatal("the pace counts every queued batch before a version named one of its own")
	}
	p.applied(proto.PolicyVersion{Version: 1, BatchID: "b1"}, at(200))
	if !p.complete() {
		t.Fatal("the pace does not count every queued batch after a version named its first")
	}
	p.released("b2", at(300), 100)
	p.applied(proto.PolicyVersion{Version: 2, BatchID: "b2"}, at(500))
	if _, ok := p.stepEnd(); ok {
		t.Fatal("a step end expected with no batch open")
	}
	p.released("b3", at(400), 100) // released before version 2: its step starts at version 2
	if _, ok := p.stepEnd(); ok {
		t.Fatalf("a step end expected after %d steps, want %d first", 2, paceMinSamples)
	}
	p.applied(proto.PolicyVersion{Version: 3, BatchID: "b3"}, at(750))
	// The watch repeating a version changes nothing.
	p.applied(proto.PolicyVersion{Version: 3, BatchID: "b3"}, at(900))
	p.released("b4", at(760), 50)
	p.released("b5", at(800), 300)
	if n := p.ahead(); n != 2 {
		t.Fatalf("%d batches ahead, want 2", n)
	}
	end, ok := p.stepEnd()
	if want := at(860); !ok || !end.Equal(want) { // b4 from its release at 760: 50 turns at 2 ms
		t.Fatalf("step end %v (ok %v), want %v", end.Sub(t0), ok, want.Sub(t0))
	}
	// A version naming a later batch closes every batch released before it too (the trainer refused b4).
	p.applied(proto.PolicyVersion{Version: 4, BatchID: "b5"}, at(1500))
	if n := p.ahead(); n != 0 {
		t.Fatalf("%d batches ahead after the version of the last one, want 0", n)
	}
	// A version naming a batch this buffer did not release (a previous buffer's) keeps the count.
	p.released("b6", at(1600), 10)
	p.applied(proto.PolicyVersion{Version: 5, BatchID: "other"}, at(1700))
	if n := p.ahead(); n != 1 {
		t.Fatalf("%d batches ahead, want 1", n)
	}
	// A new buffer's pace: versions naming a previous buffer's batches leave it incomplete.
	q := newPace()
	q.applied(proto.PolicyVersion{Version: 7, BatchID: "old-1"}, at(0))
	q.released("n1", at(10), 10)
	q.applied(proto.PolicyVersion{Version: 8, BatchID: "old-2"}, at(20))
	if q.complete() || q.ahead() != 1 {
		t.Fatalf("complete %v with %d ahead after versions of a previous buffer's batches, want false and 1", q.complete(), q.ahead())
	}
}
