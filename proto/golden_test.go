package proto_test

import (
	"bytes"
	"errors"
	"flag"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/jetrl/jetrl/proto"
	"github.com/vmihailenco/msgpack/v5"
)

var update = flag.Bool("update", false, "rewrite the golden msgpack fixtures in testdata")

// golden lists one fixture per message type; a trainer in another language can check its decoder on them.
var golden = []struct {
	file  string
	value any
	empty func() any
}{
	{"episode.msgpack", sampleEpisode(), func() any { return &proto.Episode{} }},
	{"batch.msgpack", &proto.Batch{Schema: proto.SchemaVersion, ID: "b-0123456789abcdef01234567", Episodes: []proto.Episode{*sampleEpisode()}, TrainerVersion: 41, ReleasedAt: 1764474000000000000}, func() any { return &proto.Batch{} }},
	{"train_batch.msgpack", &proto.TrainBatch{Schema: proto.SchemaVersion, ID: "b-0123456789abcdef01234567", TrainerVersion: 41,
		Episodes: []proto.TrainEpisode{{Episode: *sampleEpisode(), Advantages: []float64{0.5, 0.5}}},
		Tasks:    map[string]proto.TaskStat{"alfworld": {Episodes: 1, Successes: 1, MeanReward: 1, AdvMean: 0.25, AdvStd: 0.5}}}, func() any { return &proto.TrainBatch{} }},
	{"policy_version.msgpack", &proto.PolicyVersion{Schema: proto.SchemaVersion, Version: 42, Object: "policy-42", Size: 1048612, SHA256: "ab12", EpisodesTrained: 2688, EpisodesConsumed: 2950, BatchID: "b-0123456789abcdef01234567", PublishedAt: 1764474000000000000}, func() any { return &proto.PolicyVersion{} }},
	{"rollout_heartbeat.msgpack", &proto.RolloutHeartbeat{Schema: proto.SchemaVersion, RolloutID: "r1", Groups: []string{"g1", "g2"}, SentAt: 1764474000000000000}, func() any { return &proto.RolloutHeartbeat{} }},
	{"group_start.msgpack", &proto.GroupStart{Schema: proto.SchemaVersion, GroupID: "g1", Task: "alfworld", GroupSize: 8, StartVersion: 41, RolloutID: "r1", StartedAt: 1764474000000000000}, func() any { return &proto.GroupStart{} }},
	{"trained_groups.msgpack", &proto.TrainedGroups{Schema: proto.SchemaVersion, Version: 42, Keys: []byte{0x8c, 0xec, 0x01, 0x86, 0x4c, 0xdc, 0x63, 0xaf}}, func() any { return &proto.TrainedGroups{} }},
	{"env_start_request.msgpack", &proto.EnvStartRequest{Schema: proto.SchemaVersion, Task: "alfworld", Split: "heldout", Seed: 7, EpisodeID: "g1-0"}, func() any { return &proto.EnvStartRequest{} }},
	{"env_step_request.msgpack", &proto.EnvStepRequest{Schema: proto.SchemaVersion, SessionID: "h1-1", Call: proto.ToolCall{Name: "take_action", Arguments: `{"action":"go to fridge 1"}`}}, func() any { return &proto.EnvStepRequest{} }},
	{"env_start_batch.msgpack", &proto.EnvStartBatch{Schema: proto.SchemaVersion, Starts: []proto.EnvStartRequest{{Schema: proto.SchemaVersion, Task: "db", Split: "train", Seed: 7, EpisodeID: "g1-0"}, {Schema: proto.SchemaVersion, Task: "db", Split: "train", Seed: 7, EpisodeID: "g1-1"}}}, func() any { return &proto.EnvStartBatch{} }},
	{"env_step_batch.msgpack", &proto.EnvStepBatch{Schema: proto.SchemaVersion, Steps: []proto.EnvStepRequest{{Schema: proto.SchemaVersion, SessionID: "h1-1", Call: proto.ToolCall{Name: "execute_sql", Arguments: `{"query":"SELECT 1"}`}}}}, func() any { return &proto.EnvStepBatch{} }},
	{"env_batch_reply.msgpack", &proto.EnvBatchReply{Schema: proto.SchemaVersion, Results: []proto.EnvBatchResult{
		{Index: 0, Step: &proto.EnvStepReply{Schema: proto.SchemaVersion, Observation: "1", Admissible: []proto.ToolCall{{Name: "commit_final_answer", Arguments: `{"answer":"1"}`}}, Status: "running", Turn: 1}},
		{Index: 1, Error: "unknown or expired session: \"h1-9\" on host h1", Code: "404"},
	}}, func() any { return &proto.EnvBatchReply{} }},
	{"env_step_reply.msgpack", &proto.EnvStepReply{Schema: proto.SchemaVersion, Observation: "You arrive at fridge 1.", Admissible: []proto.ToolCall{{Name: "take_action", Arguments: `{"action":"open fridge 1"}`}}, Status: "running", Turn: 1}, func() any { return &proto.EnvStepReply{} }},
}

func sampleEpisode() *proto.Episode {
	return &proto.Episode{
		Schema: proto.SchemaVersion, ID: "g1-0", GroupID: "g1", GroupSize: 8, Task: "alfworld", Split: "train", Seed: 7,
		Instruction: "Your task is to: put a apple in fridge 1.",
		Turns: []proto.Turn{
			{Observation: "You are in the middle of a room.", Candidates: []string{"take_action go to fridge 1", "take_action go to countertop 1"}, Chosen: 1, LogProb: -0.6931471805599453, Version: 41, Policy: "current"},
			{Observation: "On the countertop 1, you see a apple 1.", Candidates: []string{"take_action take apple 1 from countertop 1"}, Chosen: 0, LogProb: 0, Version: 41, Policy: "current"},
		},
		Reward: 1, Status: "completed", RolloutID: "r1", HostID: "h1", StartedAt: 1764474000000000000, FinishedAt: 1764474000100000000, StartVersion: 41,
	}
}

func TestGoldenFixtures(t *testing.T) {
	for _, g := range golden {
		t.Run(g.file, func(t *testing.T) {
			path := filepath.Join("testdata", g.file)
			want, err := msgpack.Marshal(g.value)
			if err != nil {
				t.Fatal(err)
			}
			if *update {
				if err := os.WriteFile(path, want, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			decoded := g.empty()
			if err := msgpack.Unmarshal(got, decoded); err != nil {
				t.Fatalf("decode %s: %v", g.file, err)
			}
			if !reflect.DeepEqual(decoded, g.value) {
				t.Fatalf("decoded %s differs:\n got %+v\nwant %+v", g.file, decoded, g.value)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("encoding of %s changed: the wire format is a contract; bump SchemaVersion and document it", g.file)
			}
			// Field names on the wire are the snake_case msgpack tags, so other languages decode by name.
			var generic map[string]any
			if err := msgpack.Unmarshal(got, &generic); err != nil {
				t.Fatal(err)
			}
			if v := generic["schema"]; v != int8(proto.SchemaVersion) && v != uint8(proto.SchemaVersion) && v != int64(proto.SchemaVersion) {
				t.Fatalf("schema field = %#v (%T)", generic["schema"], generic["schema"])
			}
		})
	}
}

// Fields added within a schema are optional: a record written before episodes_consumed existed still
// decodes, with the field at zero (the staleness gate then falls back to the version bound).
func TestPolicyVersionWithoutConsumedDecodes(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "policy_version_without_consumed.msgpack"))
	if err != nil {
		t.Fatal(err)
	}
	var rec proto.PolicyVersion
	if err := msgpack.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	want := proto.PolicyVersion{Schema: proto.SchemaVersion, Version: 42, Object: "policy-42", Size: 1048612, SHA256: "ab12", EpisodesTrained: 2688,
		BatchID: "b-0123456789abcdef01234567", PublishedAt: 1764474000000000000}
	if rec != want {
		t.Fatalf("decoded %+v, want %+v", rec, want)
	}
}

func TestGroupStartValidate(t *testing.T) {
	valid := proto.GroupStart{Schema: proto.SchemaVersion, GroupID: "g1", Task: "alfworld", GroupSize: 8}
	cases := []struct {
		name     string
		given    func(*proto.GroupStart)
		expected error
	}{
		{"valid", func(*proto.GroupStart) {}, nil},
		{"wrong schema", func(g *proto.GroupStart) { g.Schema = 1 }, proto.ErrSchema},
		{"no group id", func(g *proto.GroupStart) { g.GroupID = "" }, proto.ErrMalformed},
		{"no group size", func(g *proto.GroupStart) { g.GroupSize = 0 }, proto.ErrMalformed},
		{"group size over the bound", func(g *proto.GroupStart) { g.GroupSize = proto.MaxGroupSize + 1 }, proto.ErrMalformed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := valid
			c.given(&g)
			err := g.Validate()
			if (c.expected == nil) != (err == nil) || (c.expected != nil && !errors.Is(err, c.expected)) {
				t.Fatalf("error %v, expected %v", err, c.expected)
			}
		})
	}
}

func TestEpisodeValidate(t *testing.T) {
	cases := []struct {
		name     string
		given    func(*proto.Episode)
		expected error
	}{
		{"valid", func(*proto.Episode) {}, nil},
		{"wrong schema", func(e *proto.Episode) { e.Schema = 99 }, proto.ErrSchema},
		{"no id", func(e *proto.Episode) { e.ID = "" }, proto.ErrMalformed},
		{"no group size", func(e *proto.Episode) { e.GroupSize = 0 }, proto.ErrMalformed},
		{"group size over the bound", func(e *proto.Episode) { e.GroupSize = 1 << 30 }, proto.ErrMalformed},
		{"nan reward", func(e *proto.Episode) { e.Reward = math.NaN() }, proto.ErrBadNumber},
		{"chosen out of range", func(e *proto.Episode) { e.Turns[0].Chosen = 5 }, proto.ErrMalformed},
		{"positive logprob", func(e *proto.Episode) { e.Turns[0].LogProb = 0.5 }, proto.ErrBadNumber},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ep := sampleEpisode()
			c.given(ep)
			err := ep.Validate()
			if c.expected == nil && err != nil {
				t.Fatalf("unexpected error %v", err)
			}
			if c.expected != nil && !errors.Is(err, c.expected) {
				t.Fatalf("error %v, expected %v", err, c.expected)
			}
		})
	}
}

func TestToolCallText(t *testing.T) {
	cases := []struct{ given, expected string }{
		{`{"action":"go to fridge 1"}`, "take_action go to fridge 1"},
		{`{}`, "take_action"},
		{`not json`, "take_action"},
		{`{"b":2,"a":"x"}`, "take_action x 2"},
	}
	for _, c := range cases {
		if got := (proto.ToolCall{Name: "take_action", Arguments: c.given}).Text(); got != c.expected {
			t.Errorf("Text(%s) = %q, expected %q", c.given, got, c.expected)
		}
	}
}

func TestErrorFromWire(t *testing.T) {
	for e := range proto.ErrorCodes {
		if got := proto.ErrorFromWire(e.Error() + ": details"); got != e {
			t.Errorf("ErrorFromWire(%q) = %v", e.Error(), got)
		}
	}
	if got := proto.ErrorFromWire("something else"); got != proto.ErrInternal {
		t.Errorf("unknown description mapped to %v", got)
	}
}

func TestRolloutHeartbeatValidate(t *testing.T) {
	cases := []struct {
		name     string
		given    func(*proto.RolloutHeartbeat)
		expected error
	}{
		{"valid", func(*proto.RolloutHeartbeat) {}, nil},
		{"no groups", func(h *proto.RolloutHeartbeat) { h.Groups = nil }, nil},
		{"most groups", func(h *proto.RolloutHeartbeat) { h.Groups = groupIDs(proto.MaxHeartbeatGroups) }, nil},
		{"too many groups", func(h *proto.RolloutHeartbeat) { h.Groups = groupIDs(proto.MaxHeartbeatGroups + 1) }, proto.ErrMalformed},
		{"wrong schema", func(h *proto.RolloutHeartbeat) { h.Schema = 1 }, proto.ErrSchema},
		{"no rollout id", func(h *proto.RolloutHeartbeat) { h.RolloutID = "" }, proto.ErrMalformed},
		{"empty group id", func(h *proto.RolloutHeartbeat) { h.Groups = []string{"g1", ""} }, proto.ErrMalformed},
		{"instance", func(h *proto.RolloutHeartbeat) { h.Instance = "Ab-9_z" }, nil},
		{"instance with a dot", func(h *proto.RolloutHeartbeat) { h.Instance = "a.b" }, proto.ErrMalformed},
		{"instance with a wildcard", func(h *proto.RolloutHeartbeat) { h.Instance = ">" }, proto.ErrMalformed},
		{"instance too long", func(h *proto.RolloutHeartbeat) { h.Instance = strings.Repeat("a", proto.MaxTokenLen+1) }, proto.ErrMalformed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := proto.RolloutHeartbeat{Schema: proto.SchemaVersion, RolloutID: "r1", Groups: []string{"g1", "g2"}}
			c.given(&h)
			err := h.Validate()
			if (c.expected == nil) != (err == nil) || (c.expected != nil && !errors.Is(err, c.expected)) {
				t.Fatalf("error %v, expected %v", err, c.expected)
			}
		})
	}
}

func groupIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = "g" + strconv.Itoa(i)
	}
	return ids
}
