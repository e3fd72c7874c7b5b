package replaybuffer

import (
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// read counts a stream sequence as read only once every one below it has arrived: a delivery lost in
// flight and redelivered later holds it back; a gap never filled is passed after twice ackWait.
func TestReadWaitsForGapsInTheStream(t *testing.T) {
	b := &Buffer{read: 10}
	t0 := time.Now()
	for _, seq := range []uint64{11, 12, 9, 12} { // in order, then redeliveries below read
		b.received(seq)
	}
	if b.read != 12 || len(b.above) != 0 {
		t.Fatalf("read %d, above %v: want 12 and none", b.read, b.above)
	}
	b.received(15) // 13 and 14 lost in flight
	b.received(16)
	if b.read != 12 || len(b.above) != 2 {
		t.Fatalf("read %d, above %v: want 12 with 15 and 16 held", b.read, b.above)
	}
	b.received(13) // redelivered
	if b.read != 13 {
		t.Fatalf("read %d, want 13", b.read)
	}
	b.received(14)
	if b.read != 16 || len(b.above) != 0 || !b.gapSince.IsZero() {
		t.Fatalf("read %d, above %v, gap since %v: want 16, none held, no gap", b.read, b.above, b.gapSince)
	}

	b.received(20) // 17-19 never come (acked out of order by a previous buffer)
	opened := b.gapSince
	if opened.Before(t0) {
		t.Fatalf("gap opened at %v, before the test began at %v", opened, t0)
	}
	b.checkGap(opened.Add(2*ackWait), zerolog.Nop())
	if b.read != 16 {
		t.Fatalf("read %d: a gap was passed before twice ackWait", b.read)
	}
	b.checkGap(opened.Add(2*ackWait+time.Second), zerolog.Nop())
	if b.read != 20 || len(b.above) != 0 {
		t.Fatalf("read %d, above %v: want the gap passed to 20", b.read, b.above)
	}
}
