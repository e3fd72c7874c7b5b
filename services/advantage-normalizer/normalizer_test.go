package normalizer_test

import (
	"encoding/json"
	"github.com/jetrl/jetrl/shared/bus/bustest"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/jetrl/jetrl/proto"
	normalizer "github.com/jetrl/jetrl/services/advantage-normalizer"
	"github.com/jetrl/jetrl/shared/admission"
	"github.com/jetrl/jetrl/shared/bus"
	"github.com/jetrl/jetrl/shared/codec"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

var eventually = bustest.Eventually

var testCtx = bustest.Ctx

type fixture struct {
	nc  *nats.Conn
	js  jetstream.JetStream
	n   *normalizer.Normalizer
	reg *prometheus.Registry
}

// start runs an embedded server with the mesh's topology and a normalizer on a connection of its own.
func start(t *testing.T, cfg normalizer.Config) *fixture {
	t.Helper()
	srv, err := bus.StartEmbedded(bus.EmbeddedConfig{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	conn := func() *nats.Conn {
		nc, err := bus.Connect(testCtx(t), srv.URL(), "normalizer-test", zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	f := &fixture{nc: conn(), reg: prometheus.NewRegistry()}
	if f.js, err = bus.JetStream(f.nc); err != nil {
		t.Fatal(err)
	}
	if err := bus.EnsureTopology(testCtx(t), f.js, 1); err != nil {
		t.Fatal(err)
	}
	if f.n, err = normalizer.New(cfg, normalizer.Deps{Conn: conn(), Log: zerolog.Nop(), Metrics: f.reg}); err != nil {
		t.Fatal(err)
	}
	bustest.Run(t, "advantage-normalizer", 10*time.Second, f.n.Run)
	eventually(t, 10*time.Second, "the normalizer to run", f.n.Running)
	return f
}

func (f *fixture) publish(t *testing.T, msgID string, data []byte) {
	t.Helper()
	if _, err := bus.PublishOnce(testCtx(t), f.js, proto.SubjectBatches, msgID, data); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) publishBatch(t *testing.T, msgID string, b *proto.Batch) {
	t.Helper()
	data, err := codec.Marshal(b, proto.MaxBatchBytes)
	if err != nil {
		t.Fatal(err)
	}
	f.publish(t, msgID, data)
}

func (f *fixture) msgs(t *testing.T, stream string) uint64 {
	t.Helper()
	st, err := f.js.Stream(testCtx(t), stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

func (f *fixture) get(t *testing.T, stream string, seq uint64) *jetstream.RawStreamMsg {
	t.Helper()
	st, err := f.js.Stream(testCtx(t), stream)
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetMsg(testCtx(t), seq)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func (f *fixture) trainBatch(t *testing.T, seq uint64) proto.TrainBatch {
	t.Helper()
	m := f.get(t, proto.StreamTrain, seq)
	var tb proto.TrainBatch
	if err := codec.Unmarshal(m.Data, &tb); err != nil {
		t.Fatal(err)
	}
	if id := m.Header.Get(nats.MsgIdHdr); id != tb.ID {
		t.Fatalf("train batch %s published with Nats-Msg-Id %q", tb.ID, id)
	}
	return tb
}

// counter reads one sample of a counter vector from the registry.
func counter(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

func TestBatchBecomesTrainBatch(t *testing.T) {
	f := start(t, normalizer.DefaultConfig())
	b := smallBatch()
	b.ID = "b-good"
	f.publishBatch(t, b.ID, b)
	eventually(t, 10*time.Second, "a train batch", func() bool { return f.msgs(t, proto.StreamTrain) == 1 })
	tb := f.trainBatch(t, 1)
	if tb.ID != "b-good" || tb.TrainerVersion != 7 || len(tb.Episodes) != 4 {
		t.Fatalf("train batch = id %s version %d with %d episodes", tb.ID, tb.TrainerVersion, len(tb.Episodes))
	}
	// The service applies the default setting: shaped rewards, group advantages, task normalization.
	want, err := normalizer.Advantages(smallBatch(), normalizer.Options{AbnormalReward: -0.2, TaskNorm: true, FlatGroupCoef: normalizer.DefaultFlatGroupCoef})
	if err != nil {
		t.Fatal(err)
	}
	for i := range tb.Episodes {
		if !nearAll(tb.Episodes[i].Advantages, want.Episodes[i].Advantages) {
			t.Fatalf("episode %d advantages = %v, want %v", i, tb.Episodes[i].Advantages, want.Episodes[i].Advantages)
		}
	}
	if tb.Episodes[0].Advantages[0] <= 0 || tb.Episodes[1].Advantages[0] >= 0 {
		t.Fatalf("the win must get a positive and the turn-limit loss a negative advantage: %v, %v", tb.Episodes[0].Advantages, tb.Episodes[1].Advantages)
	}
	eventually(t, 5*time.Second, "the counters", func() bool { s := f.n.Stats(); return s.Batches == 1 && s.Episodes == 4 })

	// The same batch delivered again (a new msg id, as after a crash past the dedup of the batches stream)
	// yields the same train batch id, which the train stream stores once.
	f.publishBatch(t, "b-good-again", b)
	eventually(t, 10*time.Second, "the second handling", func() bool { return f.n.Stats().Batches == 2 })
	if n := f.msgs(t, proto.StreamTrain); n != 1 {
		t.Fatalf("train stream holds %d messages after a repeated batch, want 1", n)
	}
}

func TestTaskNormOff(t *testing.T) {
	f := start(t, normalizer.Config{AbnormalReward: -0.2, TaskNorm: false})
	f.publishBatch(t, "b-1", smallBatch())
	eventually(t, 10*time.Second, "a train batch", func() bool { return f.msgs(t, proto.StreamTrain) == 1 })
	tb := f.trainBatch(t, 1)
	a1 := 0.6 / (0.6 + eps)
	if !nearAll(tb.Episodes[0].Advantages, []float64{a1, a1}) {
		t.Fatalf("advantages without task normalization = %v, want the group's %v", tb.Episodes[0].Advantages, a1)
	}
}

func TestMalformedBatchIsDeadLettered(t *testing.T) {
	f := start(t, normalizer.DefaultConfig())
	nan := smallBatch()
	nan.ID = "b-nan"
	nan.Episodes[2].Reward = math.NaN()
	tests := []struct {
		name           string
		givenData      []byte
		expectedReason string
	}{
		{name: "not msgpack", givenData: []byte("definitely not a batch"), expectedReason: proto.ErrMalformed.Error()},
		{name: "NaN reward", givenData: mustMarshal(t, nan), expectedReason: proto.ErrBadNumber.Error()},
		{name: "future schema", givenData: mustMarshal(t, &proto.Batch{Schema: proto.SchemaVersion + 1, ID: "b-future"}), expectedReason: proto.ErrSchema.Error()},
	}
	for i, tc := range tests {
		f.publish(t, "bad-"+tc.name, tc.givenData)
		seq := uint64(i + 1)
		eventually(t, 10*time.Second, "the dead letter of "+tc.name, func() bool { return f.msgs(t, proto.StreamDeadLetter) == seq })
		m := f.get(t, proto.StreamDeadLetter, seq)
		if m.Subject != proto.SubjectDeadLetterPrefix+"advantage-normalizer" {
			t.Fatalf("%s: dead letter on %s", tc.name, m.Subject)
		}
		if reason := m.Header.Get(proto.HeaderDeadLetterReason); !strings.HasPrefix(reason, tc.expectedReason) {
			t.Fatalf("%s: reason %q, want it to start with %q", tc.name, reason, tc.expectedReason)
		}
		if m.Header.Get(proto.HeaderDeadLetterSubject) != proto.SubjectBatches || string(m.Data) != string(tc.givenData) {
			t.Fatalf("%s: dead letter lost the original subject or data: %v", tc.name, m.Header)
		}
	}
	if s := f.n.Stats(); s.DeadLettered != 3 || s.Batches != 0 {
		t.Fatalf("stats = %+v, want 3 dead-lettered and none published", s)
	}
	if got := counter(t, f.reg, "jetrl_normalizer_batches_total", "outcome", "refused"); got != 3 {
		t.Fatalf("refused counter = %v, want 3", got)
	}
	// The NaN batch's 4 episodes will never train: their admissions go back to the staleness gate. The
	// batches that did not decode have none to count.
	if got := refunded(t, f); got != 4 {
		t.Fatalf("admissions refunded = %d, want the NaN batch's 4", got)
	}
	if s := f.n.Stats(); s.Refunded != 4 || s.RefundErrors != 0 {
		t.Fatalf("stats = %+v, want 4 refunded and no refund errors", s)
	}

	// The stream is not blocked: the next good batch flows.
	f.publishBatch(t, "b-after", smallBatch())
	eventually(t, 10*time.Second, "the good batch after the bad ones", func() bool { return f.msgs(t, proto.StreamTrain) == 1 })
	if tb := f.trainBatch(t, 1); tb.ID != "b-1" {
		t.Fatalf("train batch id %s, want b-1", tb.ID)
	}
	// The counters move once the batch is acked, just after its train batch is stored.
	eventually(t, 5*time.Second, "the published counter", func() bool {
		return counter(t, f.reg, "jetrl_normalizer_batches_total", "outcome", "published") == 1 && f.n.Stats().Batches == 1
	})

	// The status endpoint reports the same counters.
	msg, err := f.nc.Request(proto.SubjectStatus("advantage-normalizer"), nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var status struct {
		Service string           `json:"service"`
		Status  normalizer.Stats `json:"status"`
	}
	if err := json.Unmarshal(msg.Data, &status); err != nil {
		t.Fatal(err)
	}
	if status.Service != "advantage-normalizer" || status.Status.DeadLettered != 3 || status.Status.Batches != 1 {
		t.Fatalf("status = %s", msg.Data)
	}
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := codec.Marshal(v, 0)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestNewValidates(t *testing.T) {
	srv, err := bus.StartEmbedded(bus.EmbeddedConfig{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	nc, err := bus.Connect(testCtx(t), srv.URL(), "normalizer-test", zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	tests := []struct {
		name       string
		givenCfg   normalizer.Config
		givenConn  *nats.Conn
		expectedOK bool
	}{
		{"default", normalizer.DefaultConfig(), nc, true},
		{"zero abnormal reward", normalizer.Config{AbnormalReward: 0}, nc, true},
		{"positive abnormal reward", normalizer.Config{AbnormalReward: 0.2}, nc, false},
		{"abnormal reward below -1", normalizer.Config{AbnormalReward: -1.5}, nc, false},
		{"no connection", normalizer.DefaultConfig(), nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := normalizer.New(tc.givenCfg, normalizer.Deps{Conn: tc.givenConn, Log: zerolog.Nop()})
			if (err == nil) != tc.expectedOK {
				t.Fatalf("New error = %v, want ok %v", err, tc.expectedOK)
			}
		})
	}
	// Without the mesh's streams Run explains what is missing instead of hanging.
	n, err := normalizer.New(normalizer.DefaultConfig(), normalizer.Deps{Conn: nc, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Run(testCtx(t)); err == nil || !strings.Contains(err.Error(), "consumer") {
		t.Fatalf("Run without topology = %v, want a consumer error", err)
	}
}

// refunded reads the admissions given back to the staleness gate.
func refunded(t *testing.T, f *fixture) int64 {
	t.Helper()
	c, err := admission.Bind(testCtx(t), f.js)
	if err != nil {
		t.Fatal(err)
	}
	a, _, err := c.Read(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	return a.Refunded
}

// A batch that fits the batches stream but whose train batch (8 more bytes per turn) would not fit the
// train stream is refused, not retried for ever: it is dead-lettered, its admissions given back, and the
// batches after it flow.
func TestTrainBatchOverLimitIsDeadLettered(t *testing.T) {
	f := start(t, normalizer.DefaultConfig())
	perTurn := func(n int) int {
		b := &proto.Batch{Schema: proto.SchemaVersion, ID: "b-big", Episodes: []proto.Episode{
			episode("g-0", "g", "alfworld", 2, n, proto.StatusCompleted, 1),
			episode("g-1", "g", "alfworld", 2, n, proto.StatusCompleted, 0),
		}}
		return len(mustMarshal(t, b))
	}
	base, per := perTurn(0), float64(perTurn(1000)-perTurn(0))/2000
	n := int(float64(proto.MaxBatchBytes-4096-base) / per / 2)
	big := &proto.Batch{Schema: proto.SchemaVersion, ID: "b-big", Episodes: []proto.Episode{
		episode("g-0", "g", "alfworld", 2, n, proto.StatusCompleted, 1),
		episode("g-1", "g", "alfworld", 2, n, proto.StatusCompleted, 0),
	}}
	data := mustMarshal(t, big)
	if len(data) > proto.MaxBatchBytes || len(data)+8*2*n <= proto.MaxBatchBytes {
		t.Fatalf("test batch is %d bytes with %d turns: it must fit the limit and its advantages must not", len(data), 2*n)
	}
	f.publish(t, "b-big", data)
	eventually(t, 20*time.Second, "the dead letter of the oversized train batch", func() bool { return f.msgs(t, proto.StreamDeadLetter) == 1 })
	m := f.get(t, proto.StreamDeadLetter, 1)
	if reason := m.Header.Get(proto.HeaderDeadLetterReason); !strings.HasPrefix(reason, proto.ErrPayloadTooLarge.Error()) {
		t.Fatalf("reason %q, want it to start with %q", reason, proto.ErrPayloadTooLarge.Error())
	}
	eventually(t, 5*time.Second, "the refund", func() bool { return refunded(t, f) == 2 })
	f.publishBatch(t, "b-after", smallBatch())
	eventually(t, 10*time.Second, "the good batch after the oversized one", func() bool { return f.msgs(t, proto.StreamTrain) == 1 })
	// The counters move once the batch is acked, just after its train batch is stored.
	eventually(t, 5*time.Second, "the published counter", func() bool { return f.n.Stats().Batches == 1 })
	if s := f.n.Stats(); s.DeadLettered != 1 || s.Refunded != 2 || s.Batches != 1 {
		t.Fatalf("stats = %+v, want 1 dead-lettered, 2 refunded, 1 published", s)
	}
}
