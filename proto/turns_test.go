package proto_test

import (
	"testing"

	"github.com/jetrl/jetrl/proto"
)

func TestTurnsWithin(t *testing.T) {
	turn := func(v int64, policy string) proto.Turn { return proto.Turn{Version: v, Policy: policy} }
	cur, old, saved := proto.PolicyCurrent, proto.PolicyStale, proto.PolicyCheckpoint
	for _, c := range []struct {
		name  string
		start int64
		turns []proto.Turn
		from  int
		since int64
		ok    bool
	}{
		{"all within", 4, []proto.Turn{turn(4, cur), turn(5, cur)}, 0, 4, true},
		{"first too old", 3, []proto.Turn{turn(3, cur), turn(4, cur), turn(5, cur)}, 1, 4, true},
		{"every turn too old", 2, []proto.Turn{turn(2, cur), turn(3, cur)}, 2, 2, false},
		{"an older turn after a recent one", 3, []proto.Turn{turn(4, cur), turn(3, cur), turn(5, cur)}, 2, 5, true},
		{"the stale copy is not judged", 4, []proto.Turn{turn(0, old), turn(4, cur), turn(1, old)}, 0, 4, true},
		{"nor a saved checkpoint", 4, []proto.Turn{turn(4, cur), turn(0, saved)}, 0, 4, true},
		{"only the stale copy after the cut", 2, []proto.Turn{turn(2, cur), turn(1, old)}, 1, 2, false},
		{"no turns: admission", 4, nil, 0, 4, true},
		{"no turns, admitted too long ago", 3, nil, 0, 3, false},
	} {
		ep := proto.Episode{StartVersion: c.start, Turns: c.turns}
		from, since, ok := ep.TurnsWithin(6, 2)
		if from != c.from || since != c.since || ok != c.ok {
			t.Errorf("%s: TurnsWithin(6, 2) = %d, %d, %v; want %d, %d, %v", c.name, from, since, ok, c.from, c.since, c.ok)
		}
	}
}
