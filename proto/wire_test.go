package proto_test

import (
	"bytes"
	"encoding/binary"
	"math"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/jetrl/jetrl/proto"
	"github.com/vmihailenco/msgpack/v5"
)

func TestFloat64sWireFormat(t *testing.T) {
	blob := func(xs ...float64) []byte {
		b := make([]byte, 8*len(xs))
		for i, x := range xs {
			binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(x))
		}
		return b
	}
	tests := []struct {
		name     string
		given    proto.Float64s
		expected []byte
	}{
		{"nil is msgpack nil", nil, []byte{0xc0}},
		{"empty is an empty bin", proto.Float64s{}, []byte{0xc4, 0}},
		{"two values", proto.Float64s{0.5, -1.25}, append([]byte{0xc4, 16}, blob(0.5, -1.25)...)},
		// 40 values = 320 bytes: a bin 16 header, and more than one conversion chunk of the encoder.
		{"bin 16", make(proto.Float64s, 40), append([]byte{0xc5, 1, 64}, blob(make([]float64, 40)...)...)},
		{"special values", proto.Float64s{math.Inf(1), math.Copysign(0, -1)}, append([]byte{0xc4, 16}, blob(math.Inf(1), math.Copysign(0, -1))...)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := msgpack.Marshal(tc.given)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, tc.expected) {
				t.Fatalf("encoded % x, want % x", got, tc.expected)
			}
			var back proto.Float64s
			if err := msgpack.Unmarshal(got, &back); err != nil {
				t.Fatal(err)
			}
			if (back == nil) != (tc.given == nil) || len(back) != len(tc.given) {
				t.Fatalf("decoded %v, want %v", back, tc.given)
			}
			for i := range back {
				if math.Float64bits(back[i]) != math.Float64bits(tc.given[i]) {
					t.Fatalf("value %d decoded %v, want %v", i, back[i], tc.given[i])
				}
			}
		})
	}
}

func TestFloat64sRefusesBadBlobs(t *testing.T) {
	for name, data := range map[string][]byte{
		"length not a multiple of 8": append([]byte{0xc4, 7}, make([]byte, 7)...),
		"length beyond the input":    append([]byte{0xc6, 0x10, 0, 0, 0}, make([]byte, 16)...),
		"truncated":                  append([]byte{0xc4, 16}, make([]byte, 9)...),
		"an array (schema 1)":        {0x92, 0xcb, 0x3f, 0xe0, 0, 0, 0, 0, 0, 0, 0xcb, 0x3f, 0xe0, 0, 0, 0, 0, 0, 0},
	} {
		var f proto.Float64s
		if err := msgpack.Unmarshal(data, &f); err == nil {
			t.Errorf("%s: decoded %v without an error", name, f)
		}
	}
}

// fill sets every field of the struct v points to a distinct non-zero value, so that a decoder that misses
// a field (one added to the struct but not to the hand-written decoder) is caught.
func fill(t *testing.T, v reflect.Value, seed int) {
	t.Helper()
	for i := 0; i < v.NumField(); i++ {
		f, k := v.Field(i), seed*100+i+1
		switch f.Kind() {
		case reflect.String:
			f.SetString(strings.Repeat(string(rune('a'+i%26)), k%7+1) + v.Type().Field(i).Name)
		case reflect.Int, reflect.Int64:
			f.SetInt(int64(k) * 1_000_003)
		case reflect.Uint64:
			f.SetUint(uint64(k) << 40)
		case reflect.Float64:
			f.SetFloat(-float64(k) / 8)
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Slice:
			s := reflect.MakeSlice(f.Type(), 3, 3)
			for j := 0; j < 3; j++ {
				switch e := s.Index(j); e.Kind() {
				case reflect.String:
					e.SetString(strings.Repeat("c", j) + "andidate")
				case reflect.Struct:
					fill(t, e, k+j)
				default:
					t.Fatalf("fill: slice of %v", e.Kind())
				}
			}
			f.Set(s)
		default:
			t.Fatalf("fill: field %s of kind %v: teach fill (and the decoder in wire.go) about it", v.Type().Field(i).Name, f.Kind())
		}
	}
}

// The hand-written Episode and Turn decoders read back every field the struct tags write.
func TestEpisodeDecoderReadsEveryTaggedField(t *testing.T) {
	var want proto.Episode
	fill(t, reflect.ValueOf(&want).Elem(), 1)
	data, err := msgpack.Marshal(&want)
	if err != nil {
		t.Fatal(err)
	}
	got := proto.Episode{ID: "left over", Turns: []proto.Turn{{Observation: "old"}}}
	if err := msgpack.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded\n%+v\nwant\n%+v", got, want)
	}
	// Inside a batch and a train batch (decoded by reflection around the hand-written parts).
	tb := proto.TrainBatch{Schema: proto.SchemaVersion, ID: "b", Episodes: []proto.TrainEpisode{{Episode: want, Advantages: proto.Float64s{1, 2, 3}}}}
	if data, err = msgpack.Marshal(&tb); err != nil {
		t.Fatal(err)
	}
	var tbBack proto.TrainBatch
	if err := msgpack.Unmarshal(data, &tbBack); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(tbBack, tb) {
		t.Fatalf("train batch decoded\n%+v\nwant\n%+v", tbBack, tb)
	}
}

// A producer in another language may order keys differently, add fields, or send nil for a string.
func TestEpisodeDecoderToleratesOtherProducers(t *testing.T) {
	data, err := msgpack.Marshal(map[string]any{
		"turns": []any{map[string]any{"policy": "stale", "future": []any{1, "x", map[string]any{"y": nil}},
			"candidates": []any{"go west", nil, "look"}, "chosen": uint8(2), "observation": nil, "logprob": float32(-0.5), "version": int8(3)}},
		"schema": int8(proto.SchemaVersion), "id": "e-1", "a_key_much_longer_than_thirty_two_bytes_of_scratch": "ignored",
		"group_id": "g", "group_size": 8, "task": "alfworld", "split": "heldout", "seed": uint64(math.MaxUint64),
		"reward": 1, "status": "some-future-status", "started_at": int64(-1),
	})
	if err != nil {
		t.Fatal(err)
	}
	var got proto.Episode
	if err := msgpack.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	want := proto.Episode{Schema: proto.SchemaVersion, ID: "e-1", GroupID: "g", GroupSize: 8, Task: "alfworld", Split: proto.SplitHeldout,
		Seed: math.MaxUint64, Reward: 1, Status: "some-future-status", StartedAt: -1,
		Turns: []proto.Turn{{Candidates: []string{"go west", "", "look"}, Chosen: 2, LogProb: -0.5, Version: 3, Policy: proto.PolicyStale}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded\n%+v\nwant\n%+v", got, want)
	}
	var null proto.Episode
	if err := msgpack.Unmarshal([]byte{0xc0}, &null); err != nil || !reflect.DeepEqual(null, proto.Episode{}) {
		t.Fatalf("nil decoded to %+v, %v", null, err)
	}
}

func TestEpisodeDecoderRefusesMalformedInput(t *testing.T) {
	good, err := msgpack.Marshal(sampleEpisode())
	if err != nil {
		t.Fatal(err)
	}
	for n := 0; n < len(good); n++ {
		var ep proto.Episode
		if err := msgpack.Unmarshal(good[:n], &ep); err == nil {
			t.Fatalf("truncated to %d of %d bytes: no error", n, len(good))
		}
	}
	huge := map[string][]byte{
		"turns":      {0x81, 0xa5, 't', 'u', 'r', 'n', 's', 0xdd, 0x7f, 0xff, 0xff, 0xff},
		"candidates": {0x81, 0xa5, 't', 'u', 'r', 'n', 's', 0x91, 0x81, 0xaa, 'c', 'a', 'n', 'd', 'i', 'd', 'a', 't', 'e', 's', 0xdd, 0x7f, 0xff, 0xff, 0xff},
		"a string":   {0x81, 0xa2, 'i', 'd', 0xdb, 0x7f, 0xff, 0xff, 0xff},
		"an array":   {0x91, 0x01},
	}
	for name, data := range huge {
		var ep proto.Episode
		if err := msgpack.Unmarshal(data, &ep); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// Types without the hand-written methods: the reflecting encoder writes them from the struct tags.
type (
	rawTurn    proto.Turn
	rawEpisode proto.Episode
)

// The hand-written encoders write the very bytes the reflecting encoder writes from the struct tags.
func TestEncodersMatchTheStructTags(t *testing.T) {
	var full proto.Episode
	fill(t, reflect.ValueOf(&full).Elem(), 2)
	full.Turns[1].Observation = strings.Repeat("long observation ", 300) // str16
	full.Turns[2].Candidates = nil
	full.Turns[0].Candidates = []string{}
	full.Turns[0].Chosen, full.Turns[0].Version, full.Turns[0].LogProb = -1, math.MinInt64, math.Inf(-1)
	bare := full
	bare.Failure, bare.Turns, bare.Seed, bare.GroupSize, bare.Instruction = "", nil, 0, 300, strings.Repeat("i", 40)
	empty := proto.Episode{Turns: []proto.Turn{}}
	for name, ep := range map[string]proto.Episode{"every field": full, "failure omitted, no turns": bare, "zero": {}, "empty turns": empty} {
		got, err := msgpack.Marshal(ep)
		if err != nil {
			t.Fatal(err)
		}
		want, err := msgpack.Marshal(rawEpisode(ep))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: episode encoded\n% x\nthe struct tags give\n% x", name, got, want)
		}
		for i, turn := range ep.Turns {
			got, err := msgpack.Marshal(turn)
			if err != nil {
				t.Fatal(err)
			}
			want, err := msgpack.Marshal(rawTurn(turn))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s: turn %d encoded\n% x\nthe struct tags give\n% x", name, i, got, want)
			}
		}
	}
}

// The env step messages' hand-written codecs write the bytes of the reflecting codec and read them back.
func TestEnvStepCodecsMatchTheReflectingCodec(t *testing.T) {
	type plainCall proto.ToolCall
	type plainRequest proto.EnvStepRequest
	type plainReply proto.EnvStepReply
	type plainStepBatch proto.EnvStepBatch
	type plainResult proto.EnvBatchResult
	type plainMessage proto.Message
	type plainTool proto.Tool
	type plainStart struct { // EnvStartReply's fields and tags, with the plain element types
		Schema      int            `msgpack:"schema"`
		SessionID   string         `msgpack:"session_id"`
		HostID      string         `msgpack:"host_id"`
		Messages    []plainMessage `msgpack:"messages"`
		Tools       []plainTool    `msgpack:"tools"`
		Admissible  []plainCall    `msgpack:"admissible"`
		MaxTurns    int            `msgpack:"max_turns"`
		Instruction string         `msgpack:"instruction"`
		Observation string         `msgpack:"observation"`
	}
	type plainBatchReply struct {
		Schema  int           `msgpack:"schema"`
		Results []plainResult `msgpack:"results"`
	}
	call := proto.ToolCall{Name: "execute_sql", Arguments: `{"query":"SELECT name FROM t"}`}
	steps := []proto.EnvStepRequest{{Schema: proto.SchemaVersion, SessionID: "h1-7", Call: call}, {Schema: proto.SchemaVersion, SessionID: "h1-8"}}
	start := &proto.EnvStartReply{Schema: proto.SchemaVersion, SessionID: "h1-9", HostID: "h1", Messages: []proto.Message{{Role: "user", Content: "find it"}},
		Tools: []proto.Tool{{Name: "execute_sql", Description: "runs a query"}}, Admissible: []proto.ToolCall{call}, MaxTurns: 8, Instruction: "find it", Observation: "ready"}
	step := &proto.EnvStepReply{Schema: proto.SchemaVersion, Observation: "done", Done: true, Reward: 1, Status: proto.StatusCompleted, Turn: 4}
	results := []proto.EnvBatchResult{{Index: 0, Start: start}, {Index: 3, Step: step}, {Index: 7, Error: "unknown session", Code: "unknown_session"}, {Index: 1}}
	plainResults := make([]plainResult, len(results))
	for i, r := range results {
		plainResults[i] = plainResult(r)
	}
	tests := []struct {
		name    string
		given   any
		plain   any
		decoded func() any
	}{
		{"tool call", call, plainCall(call), func() any { return &proto.ToolCall{} }},
		{"message", proto.Message{Role: "user", Content: "find it"}, plainMessage{Role: "user", Content: "find it"}, func() any { return &proto.Message{} }},
		{"tool", proto.Tool{Name: "execute_sql", Description: "runs a query", Parameters: `{"type":"object"}`},
			plainTool{Name: "execute_sql", Description: "runs a query", Parameters: `{"type":"object"}`}, func() any { return &proto.Tool{} }},
		{"start reply", *start, plainStart{Schema: start.Schema, SessionID: start.SessionID, HostID: start.HostID,
			Messages: []plainMessage{plainMessage(start.Messages[0])}, Tools: []plainTool{plainTool(start.Tools[0])}, Admissible: []plainCall{plainCall(call)},
			MaxTurns: start.MaxTurns, Instruction: start.Instruction, Observation: start.Observation}, func() any { return &proto.EnvStartReply{} }},
		{"start reply without lists", proto.EnvStartReply{Schema: proto.SchemaVersion, SessionID: "h1-10", Tools: []proto.Tool{}, Instruction: strings.Repeat("long goal ", 40)},
			plainStart{Schema: proto.SchemaVersion, SessionID: "h1-10", Tools: []plainTool{}, Instruction: strings.Repeat("long goal ", 40)}, func() any { return &proto.EnvStartReply{} }},
		{"step request", proto.EnvStepRequest{Schema: proto.SchemaVersion, SessionID: "h1-7", Call: call},
			plainRequest{Schema: proto.SchemaVersion, SessionID: "h1-7", Call: call}, func() any { return &proto.EnvStepRequest{} }},
		{"step reply", proto.EnvStepReply{Schema: proto.SchemaVersion, Observation: "3 rows", Admissible: []proto.ToolCall{call, {Name: "commit_final_answer"}}, Reward: 0.5, Status: proto.StatusRunning, Turn: 300, Metrics: map[string]float64{"invalid_call": 1}},
			plainReply{Schema: proto.SchemaVersion, Observation: "3 rows", Admissible: []proto.ToolCall{call, {Name: "commit_final_answer"}}, Reward: 0.5, Status: proto.StatusRunning, Turn: 300, Metrics: map[string]float64{"invalid_call": 1}},
			func() any { return &proto.EnvStepReply{} }},
		{"final step reply without metrics or calls", proto.EnvStepReply{Schema: proto.SchemaVersion, Observation: "done", Done: true, Reward: 1, Status: proto.StatusCompleted, Turn: 4},
			plainReply{Schema: proto.SchemaVersion, Observation: "done", Done: true, Reward: 1, Status: proto.StatusCompleted, Turn: 4},
			func() any { return &proto.EnvStepReply{} }},
		{"an unknown status", proto.EnvStepReply{Schema: proto.SchemaVersion, Admissible: []proto.ToolCall{}, Status: "paused"},
			plainReply{Schema: proto.SchemaVersion, Admissible: []proto.ToolCall{}, Status: "paused"}, func() any { return &proto.EnvStepReply{} }},
		{"step batch", proto.EnvStepBatch{Schema: proto.SchemaVersion, Steps: steps},
			plainStepBatch{Schema: proto.SchemaVersion, Steps: steps}, func() any { return &proto.EnvStepBatch{} }},
		{"step batch without steps", proto.EnvStepBatch{Schema: proto.SchemaVersion},
			plainStepBatch{Schema: proto.SchemaVersion}, func() any { return &proto.EnvStepBatch{} }},
		{"batch reply", proto.EnvBatchReply{Schema: proto.SchemaVersion, Results: results},
			plainBatchReply{Schema: proto.SchemaVersion, Results: plainResults}, func() any { return &proto.EnvBatchReply{} }},
		{"batch reply without results", proto.EnvBatchReply{Schema: proto.SchemaVersion, Results: []proto.EnvBatchResult{}},
			plainBatchReply{Schema: proto.SchemaVersion, Results: []plainResult{}}, func() any { return &proto.EnvBatchReply{} }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := msgpack.Marshal(tc.given)
			if err != nil {
				t.Fatal(err)
			}
			want, err := msgpack.Marshal(tc.plain)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("encoded\n% x\nthe reflecting codec writes\n% x", got, want)
			}
			back := tc.decoded()
			if err := msgpack.Unmarshal(got, back); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(reflect.ValueOf(back).Elem().Interface(), tc.given) {
				t.Fatalf("decoded %+v, want %+v", back, tc.given)
			}
		})
	}
}

// Another producer may order the keys otherwise, add keys of its own or send nil for a list.
func TestEnvStepReplyDecoderToleratesOtherProducers(t *testing.T) {
	data, err := msgpack.Marshal(map[string]any{"turn": 2, "status": "running", "a_new_field": []int{1, 2}, "admissible": nil,
		"observation": "ok", "schema": proto.SchemaVersion, strings.Repeat("k", 40): true, "call": "ignored"})
	if err != nil {
		t.Fatal(err)
	}
	var got proto.EnvStepReply
	if err := msgpack.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	want := proto.EnvStepReply{Schema: proto.SchemaVersion, Observation: "ok", Status: proto.StatusRunning, Turn: 2}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded %+v, want %+v", got, want)
	}
	for _, bad := range [][]byte{{0x81, 0xa4, 't', 'u', 'r', 'n', 0xa1, 'x'}, {0x82, 0xaa}, {0x81, 0xaa, 'a', 'd', 'm', 'i', 's', 's', 'i', 'b', 'l', 'e', 0xdd, 0xff, 0xff, 0xff, 0xff}} {
		if err := msgpack.Unmarshal(bad, &got); err == nil {
			t.Fatalf("% x decoded without an error", bad)
		}
	}
}

// A start reply from another producer: keys in another order and of its own, nil lists; malformed input is
// refused.
func TestEnvStartReplyDecoderToleratesOtherProducers(t *testing.T) {
	data, err := msgpack.Marshal(map[string]any{"observation": "ready", "tools": []any{map[string]any{"parameters": "{}", "name": "pick", "version": 2}},
		"messages": nil, "later_field": map[string]int{"a": 1}, "max_turns": 4, "session_id": "h2-1", "schema": proto.SchemaVersion})
	if err != nil {
		t.Fatal(err)
	}
	var got proto.EnvStartReply
	if err := msgpack.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	want := proto.EnvStartReply{Schema: proto.SchemaVersion, SessionID: "h2-1", Tools: []proto.Tool{{Name: "pick", Parameters: "{}"}}, MaxTurns: 4, Observation: "ready"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded %+v, want %+v", got, want)
	}
	// Truncated, a tool that is not a map, a message count larger than the message, a string where the
	// turn limit goes.
	for _, bad := range [][]byte{data[:len(data)-4], {0x81, 0xa5, 't', 'o', 'o', 'l', 's', 0x91, 0x05},
		{0x81, 0xa8, 'm', 'e', 's', 's', 'a', 'g', 'e', 's', 0xdd, 0x00, 0xff, 0xff, 0xff}, {0x81, 0xa9, 'm', 'a', 'x', '_', 't', 'u', 'r', 'n', 's', 0xa1, 'x'}} {
		var r proto.EnvStartReply
		if err := msgpack.Unmarshal(bad, &r); err == nil {
			t.Errorf("% x: no error", bad)
		}
	}
}

// A batch reply from another producer: keys in another order, nil start and step, keys of its own.
func TestEnvBatchReplyDecoderToleratesOtherProducers(t *testing.T) {
	data, err := msgpack.Marshal(map[string]any{"results": []any{
		map[string]any{"step": nil, "start": nil, "code": "unknown_session", "index": 2, "extra": []int{1}},
		map[string]any{"index": 0, "step": map[string]any{"status": "completed", "done": true, "schema": proto.SchemaVersion}},
	}, "later_field": "x", "schema": proto.SchemaVersion})
	if err != nil {
		t.Fatal(err)
	}
	var got proto.EnvBatchReply
	if err := msgpack.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	want := proto.EnvBatchReply{Schema: proto.SchemaVersion, Results: []proto.EnvBatchResult{
		{Index: 2, Code: "unknown_session"},
		{Index: 0, Step: &proto.EnvStepReply{Schema: proto.SchemaVersion, Status: proto.StatusCompleted, Done: true}},
	}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded %+v, want %+v", got, want)
	}
	// Truncated, a result that is not a map, a count larger than the message.
	for _, bad := range [][]byte{data[:len(data)-3], {0x81, 0xa7, 'r', 'e', 's', 'u', 'l', 't', 's', 0x91, 0x05}, {0x81, 0xa7, 'r', 'e', 's', 'u', 'l', 't', 's', 0xdd, 0x00, 0xff, 0xff, 0xff}} {
		var r proto.EnvBatchReply
		if err := msgpack.Unmarshal(bad, &r); err == nil {
			t.Errorf("% x: no error", bad)
		}
	}
}

// A slice of structs whose header claims more elements than the bytes that follow is refused before it is
// allocated: the reflecting decoder would size it by the claim (2^32 elements: terabytes).
func TestStructSlicesRefuseLengthsTheInputCannotHold(t *testing.T) {
	field := func(name string) []byte {
		b := append([]byte{0x81, 0xa0 | byte(len(name))}, name...)
		return append(b, 0xdd, 0xff, 0xff, 0xff, 0xff) // array32 of 4,294,967,295 elements, none following
	}
	mapField := func(name string) []byte {
		b := append([]byte{0x81, 0xa0 | byte(len(name))}, name...)
		return append(b, 0xdf, 0xff, 0xff, 0xff, 0xff) // map32 of 4,294,967,295 entries, none following
	}
	cases := map[string]struct {
		data []byte
		into any
	}{
		"EnvStartBatch.starts":     {field("starts"), &proto.EnvStartBatch{}},
		"EnvStepBatch.steps":       {field("steps"), &proto.EnvStepBatch{}},
		"EnvBatchReply.results":    {field("results"), &proto.EnvBatchReply{}},
		"Batch.episodes":           {field("episodes"), &proto.Batch{}},
		"TrainBatch.episodes":      {field("episodes"), &proto.TrainBatch{}},
		"EnvStartReply.tools":      {field("tools"), &proto.EnvStartReply{}},
		"EnvStartReply.admissible": {field("admissible"), &proto.EnvStartReply{}},
		"EnvStartReply.messages":   {field("messages"), &proto.EnvStartReply{}},
		"RolloutHeartbeat.groups":  {field("groups"), &proto.RolloutHeartbeat{}},
		"TrainBatch.tasks":         {mapField("tasks"), &proto.TrainBatch{}},
		"TrainStep.tasks":          {mapField("tasks"), &proto.TrainStep{}},
	}
	for name, c := range cases {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		err := msgpack.Unmarshal(c.data, c.into)
		runtime.ReadMemStats(&after)
		if err == nil || !strings.Contains(err.Error(), "exceeds") {
			t.Errorf("%s: error %v, want the length refused", name, err)
		}
		if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
			t.Errorf("%s: decoding allocated %d bytes", name, grew)
		}
	}
	// A well-formed batch still decodes, elements and all.
	b := proto.Batch{Schema: proto.SchemaVersion, ID: "b", Episodes: []proto.Episode{*sampleEpisode(), *sampleEpisode()}}
	data, err := msgpack.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	var got proto.Batch
	if err := msgpack.Unmarshal(data, &got); err != nil || !reflect.DeepEqual(got, b) {
		t.Fatalf("batch decoded to %+v, %v", got, err)
	}
	// And a train step's tasks, entries and all.
	pv := proto.TrainStep{Schema: proto.SchemaVersion, Version: 3, Tasks: map[string]proto.TaskStat{"os": {Episodes: 4, Successes: 2, MeanReward: 0.5}, "kg": {Episodes: 2}}}
	if data, err = msgpack.Marshal(pv); err != nil {
		t.Fatal(err)
	}
	var gotPV proto.TrainStep
	if err := msgpack.Unmarshal(data, &gotPV); err != nil || !reflect.DeepEqual(gotPV, pv) {
		t.Fatalf("train step decoded to %+v, %v", gotPV, err)
	}
}
