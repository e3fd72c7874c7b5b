package codec_test

import (
	"testing"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/shared/codec"
)

// dataObjects is the fewest heap objects a decoded episode can be made of: its own strings that are not
// one of the shared constants (split, status and policy are), the turns array, and per turn the candidates
// array and one block holding its observation and candidate texts.
func dataObjects(ep *proto.Episode) int {
	n := 0
	for _, s := range []string{ep.ID, ep.GroupID, ep.Task, ep.Instruction, ep.Failure, ep.RolloutID, ep.HostID} {
		if s != "" {
			n++
		}
	}
	if len(ep.Turns) > 0 {
		n++
	}
	for _, t := range ep.Turns {
		n += 2
		if len(t.Candidates) == 0 {
			n--
		}
	}
	return n
}

// Decoding an episode allocates nothing beyond the decoded data itself: no reader, no decoder, no key
// strings, no grown-and-copied slices, no copies of the enumerated strings. (Under the race detector the
// count is not checked; `make test-unit` runs this test once more without it.)
func TestDecodeEpisodeAllocatesOnlyItsData(t *testing.T) {
	for _, turns := range []int{0, 1, 10, 40} {
		ep := benchEpisode(turns)
		data, err := codec.Marshal(&ep, proto.MaxEpisodeBytes)
		if err != nil {
			t.Fatal(err)
		}
		var out proto.Episode
		decode := func() {
			if err := codec.Unmarshal(data, &out); err != nil {
				t.Fatal(err)
			}
		}
		decode() // warm the pools
		got := testing.AllocsPerRun(200, decode)
		if want := dataObjects(&ep); got > float64(want) && !raceEnabled {
			t.Errorf("%d turns: %.1f allocations per decode, want at most %d (the decoded data)", turns, got, want)
		}
		if out.ID != ep.ID || len(out.Turns) != turns || (turns > 0 && out.Turns[turns-1].Candidates[11] != ep.Turns[turns-1].Candidates[11]) {
			t.Fatalf("%d turns: decoded %+v", turns, out)
		}
	}
}
