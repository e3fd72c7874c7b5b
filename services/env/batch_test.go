package env_test

import (
	"strings"
	"testing"
	"time"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/services/env"
	"github.com/jetrl/jetrl/services/env/task"
	"github.com/jetrl/jetrl/services/env/task/alfworld"
	"github.com/jetrl/jetrl/services/env/task/builtin"
	"github.com/jetrl/jetrl/shared/codec"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// startMetered runs a host whose metrics go to a registry of the test's.
func (f *fixture) startMetered(t *testing.T, cfg env.Config, families task.Registry) (*env.Host, *prometheus.Registry) {
	t.Helper()
	if families == nil {
		families = builtin.Registry()
	}
	reg := prometheus.NewRegistry()
	h, err := env.New(cfg, env.Deps{Conn: f.conn(t), Families: families, Log: zerolog.Nop(), Metrics: reg})
	if err != nil {
		t.Fatal(err)
	}
	stop := runHost(t, h)
	t.Cleanup(stop)
	return h, reg
}

// counted is the value of jetrl_env_request_errors_total{endpoint, code}.
func counted(t *testing.T, reg *prometheus.Registry, endpoint, code string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "jetrl_env_request_errors_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["endpoint"] == endpoint && labels["code"] == code {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// batchCall sends a batch request with a reply subject of its own and collects the replies until want
// results have come (or the deadline passes); it returns the results by index and the messages they came in.
func batchCall(t *testing.T, nc *nats.Conn, subject string, req any, want int) (map[int]proto.EnvBatchResult, []*nats.Msg) {
	t.Helper()
	data, err := codec.Marshal(req, 0)
	if err != nil {
		t.Fatal(err)
	}
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest(subject, inbox, data); err != nil {
		t.Fatal(err)
	}
	results := map[int]proto.EnvBatchResult{}
	var msgs []*nats.Msg
	for len(results) < want {
		m, err := sub.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("after %d of %d results: %v", len(results), want, err)
		}
		msgs = append(msgs, m)
		if desc := m.Header.Get(micro.ErrorHeader); desc != "" {
			return results, msgs
		}
		var rep proto.EnvBatchReply
		if err := codec.Unmarshal(m.Data, &rep); err != nil {
			t.Fatal(err)
		}
		for _, r := range rep.Results {
			if _, dup := results[r.Index]; dup {
				t.Fatalf("result %d came twice", r.Index)
			}
			results[r.Index] = r
		}
	}
	return results, msgs
}

// A start batch opens every session it can and says why it could not open the others, each by index; a
// step batch answers every step, good and bad alike, and every error is counted as a single call's would be.
func TestBatchesAnswerEveryCallByIndex(t *testing.T) {
	f := newFixture(t)
	h, reg := f.startMetered(t, env.Config{HostID: "hb", Capacity: 3}, nil)
	starts := proto.EnvStartBatch{Schema: proto.SchemaVersion, Starts: []proto.EnvStartRequest{
		{Schema: proto.SchemaVersion, Task: alfworld.Name, Split: proto.SplitTrain, Seed: 1},
		{Schema: proto.SchemaVersion, Task: "chess", Split: proto.SplitTrain},
		{Schema: 99, Task: alfworld.Name, Split: proto.SplitTrain},
		{Schema: proto.SchemaVersion, Task: alfworld.Name, Split: proto.SplitTrain, Seed: 2},
		{Schema: proto.SchemaVersion, Task: alfworld.Name, Split: proto.SplitHeldout, Seed: 3},
		{Schema: proto.SchemaVersion, Task: alfworld.Name, Split: proto.SplitTrain, Seed: 4}, // the host holds 3
	}}
	got, msgs := batchCall(t, f.nc, proto.SubjectEnvStartBatch, starts, len(starts.Starts))
	if len(msgs) != 1 {
		t.Fatalf("start batch answered in %d messages, want 1", len(msgs))
	}
	expectedErr := map[int]string{1: proto.ErrUnknownTask.Error(), 2: proto.ErrSchema.Error(), 5: proto.ErrHostFull.Error()}
	expectedCode := map[int]string{1: "404", 2: "400", 5: "503"}
	var sessions []string
	for i := range starts.Starts {
		r := got[i]
		if want, bad := expectedErr[i]; bad {
			if r.Start != nil || !strings.HasPrefix(r.Error, want) || r.Code != expectedCode[i] {
				t.Fatalf("start %d: %+v, want error %q code %s", i, r, want, expectedCode[i])
			}
			continue
		}
		if r.Start == nil || r.Error != "" || r.Start.HostID != "hb" || !strings.HasPrefix(r.Start.SessionID, "hb-") {
			t.Fatalf("start %d: %+v, want a session on hb", i, r)
		}
		sessions = append(sessions, r.Start.SessionID)
	}
	if h.Active() != 3 {
		t.Fatalf("active = %d, want 3", h.Active())
	}
	for code, want := range map[string]float64{"404": 1, "400": 1, "503": 1} {
		if n := counted(t, reg, "starts", code); n != want {
			t.Fatalf("starts errors with code %s counted %v, want %v", code, n, want)
		}
	}

	look := proto.ToolCall{Name: alfworld.ToolName, Arguments: `{"action":"look"}`}
	steps := proto.EnvStepBatch{Schema: proto.SchemaVersion, Steps: []proto.EnvStepRequest{
		{Schema: proto.SchemaVersion, SessionID: sessions[0], Call: look},
		{Schema: proto.SchemaVersion, SessionID: "hb-999", Call: look},
		{Schema: 1, SessionID: sessions[1], Call: look},
		{Schema: proto.SchemaVersion, SessionID: sessions[2], Call: proto.ToolCall{Name: "rm_rf", Arguments: `{}`}},
	}}
	got, _ = batchCall(t, f.nc, proto.SubjectEnvStepBatch("hb"), steps, len(steps.Steps))
	if r := got[0]; r.Step == nil || r.Step.Turn != 1 || r.Step.Status != proto.StatusRunning {
		t.Fatalf("step 0: %+v, want turn 1 running", r)
	}
	if r := got[1]; r.Step != nil || !strings.HasPrefix(r.Error, proto.ErrUnknownSession.Error()) || !strings.Contains(r.Error, "hb-999") || r.Code != "404" {
		t.Fatalf("step 1: %+v, want the unknown session named", r)
	}
	if r := got[2]; r.Step != nil || !strings.HasPrefix(r.Error, proto.ErrSchema.Error()) || r.Code != "400" {
		t.Fatalf("step 2: %+v, want a schema error", r)
	}
	if r := got[3]; r.Step == nil || !strings.Contains(r.Step.Observation, "unknown tool") || r.Step.Metrics["invalid_call"] != 1 {
		t.Fatalf("step 3: %+v, want an observation that names the unknown tool", r)
	}
	if n := counted(t, reg, "steps", "404") + counted(t, reg, "steps", "400"); n != 2 {
		t.Fatalf("step errors counted %v, want 2", n)
	}
}

// Steps of one batch run at once: a slow one does not hold up the others' answers, which come first; the
// slow one's comes on its own when it is done.
func TestStepBatchDoesNotWaitForItsSlowestStep(t *testing.T) {
	f := newFixture(t)
	fam := newBlockingFamily()
	fam.blockSeed = 7
	f.startMetered(t, env.Config{HostID: "hs"}, task.Registry{alfworld.Name: fam})
	var starts proto.EnvStartBatch
	starts.Schema = proto.SchemaVersion
	for seed := uint64(5); seed <= 8; seed++ {
		starts.Starts = append(starts.Starts, proto.EnvStartRequest{Schema: proto.SchemaVersion, Task: alfworld.Name, Split: proto.SplitTrain, Seed: seed})
	}
	opened, _ := batchCall(t, f.nc, proto.SubjectEnvStartBatch, starts, 4)
	look := proto.ToolCall{Name: alfworld.ToolName, Arguments: `{"action":"look"}`}
	steps := proto.EnvStepBatch{Schema: proto.SchemaVersion}
	for i := range 4 {
		steps.Steps = append(steps.Steps, proto.EnvStepRequest{Schema: proto.SchemaVersion, SessionID: opened[i].Start.SessionID, Call: look})
	}
	data, err := codec.Marshal(steps, 0)
	if err != nil {
		t.Fatal(err)
	}
	inbox := f.nc.NewInbox()
	sub, err := f.nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.nc.PublishRequest(proto.SubjectEnvStepBatch("hs"), inbox, data); err != nil {
		t.Fatal(err)
	}
	read := func() proto.EnvBatchReply {
		t.Helper()
		m, err := sub.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var rep proto.EnvBatchReply
		if err := codec.Unmarshal(m.Data, &rep); err != nil {
			t.Fatal(err)
		}
		return rep
	}
	wait(t, fam.entered, "the slow step to start")
	// While the slow step is held, the three quick ones are answered (in one message when they finish
	// within the host's linger of each other, as they do unless the machine stalls).
	for quick := 0; quick < 3; {
		rep := read()
		for _, r := range rep.Results {
			if r.Index == 2 || r.Step == nil {
				t.Fatalf("reply while the slow step is held: %+v, want only the steps of seeds 5, 6 and 8", r)
			}
			quick++
		}
	}
	close(fam.release)
	second := read()
	if len(second.Results) != 1 || second.Results[0].Index != 2 || second.Results[0].Step == nil || second.Results[0].Step.Turn != 1 {
		t.Fatalf("second reply: %+v, want the slow step (index 2) alone", second)
	}
}

func TestMalformedBatchesGetAnErrorReply(t *testing.T) {
	f := newFixture(t)
	h, reg := f.startMetered(t, env.Config{HostID: "hm"}, nil)
	tooMany := proto.EnvStepBatch{Schema: proto.SchemaVersion, Steps: make([]proto.EnvStepRequest, proto.MaxEnvBatchItems+1)}
	tests := []struct {
		name         string
		givenSubject string
		givenReq     any
		givenData    []byte
		expectedCode string
		expectedDesc string
	}{
		{"garbage start batch", proto.SubjectEnvStartBatch, nil, []byte("starts?"), "400", proto.ErrMalformed.Error()},
		{"empty step batch", proto.SubjectEnvStepBatch("hm"), proto.EnvStepBatch{Schema: proto.SchemaVersion}, nil, "400", proto.ErrMalformed.Error()},
		{"future schema", proto.SubjectEnvStepBatch("hm"), proto.EnvStepBatch{Schema: 9, Steps: []proto.EnvStepRequest{{}}}, nil, "400", proto.ErrSchema.Error()},
		{"too many steps", proto.SubjectEnvStepBatch("hm"), tooMany, nil, "413", proto.ErrPayloadTooLarge.Error()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			data := tc.givenData
			if tc.givenReq != nil {
				var err error
				if data, err = codec.Marshal(tc.givenReq, 0); err != nil {
					t.Fatal(err)
				}
			}
			msg, err := f.nc.Request(tc.givenSubject, data, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if code := msg.Header.Get(micro.ErrorCodeHeader); code != tc.expectedCode {
				t.Fatalf("error code %q, want %q", code, tc.expectedCode)
			}
			if desc := msg.Header.Get(micro.ErrorHeader); !strings.HasPrefix(desc, tc.expectedDesc) {
				t.Fatalf("error description %q, want it to start with %q", desc, tc.expectedDesc)
			}
		})
	}
	if n := counted(t, reg, "starts", "400") + counted(t, reg, "steps", "400") + counted(t, reg, "steps", "413"); n != 4 {
		t.Fatalf("malformed batches counted %v, want 4", n)
	}
	if !h.Running() {
		t.Fatal("the host stopped serving")
	}
}
