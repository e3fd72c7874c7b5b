package replaybuffer_test

import (
	"errors"
	"fmt"
	"github.com/jetrl/jetrl/shared/bus/bustest"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jetrl/jetrl/proto"
	replaybuffer "github.com/jetrl/jetrl/services/replay-buffer"
	"github.com/jetrl/jetrl/shared/admission"
	"github.com/jetrl/jetrl/shared/bus"
	"github.com/jetrl/jetrl/shared/codec"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

var eventually = bustest.Eventually

var testCtx = bustest.Ctx

type mesh struct {
	url     string
	js      jetstream.JetStream
	counter *admission.Counter
}

func newMesh(t *testing.T) *mesh {
	t.Helper()
	srv, err := bus.StartEmbedded(bus.EmbeddedConfig{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	m := &mesh{url: srv.URL()}
	if m.js, err = bus.JetStream(m.conn(t)); err != nil {
		t.Fatal(err)
	}
	if err := bus.EnsureTopology(testCtx(t), m.js, 1); err != nil {
		t.Fatal(err)
	}
	if m.counter, err = admission.Bind(testCtx(t), m.js); err != nil {
		t.Fatal(err)
	}
	return m
}

func (m *mesh) conn(t *testing.T) *nats.Conn {
	t.Helper()
	nc, err := bus.Connect(testCtx(t), m.url, "replay-buffer-test", zerolog.Nop(), bus.Unbuffered())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// bufferedConn is a connection with nats.go's default reconnect buffer.
func (m *mesh) bufferedConn(t *testing.T) *nats.Conn {
	t.Helper()
	nc, err := bus.Connect(testCtx(t), m.url, "replay-buffer-test-buffered", zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// setVersion publishes the trainer's version record, as the trainer does.
func (m *mesh) setVersion(t *testing.T, v int64) {
	t.Helper()
	m.applied(t, v, "")
}

// applied puts version v in the policy bucket as the trainer does after applying batch batchID.
func (m *mesh) applied(t *testing.T, v int64, batchID string) {
	t.Helper()
	kv, err := m.js.KeyValue(testCtx(t), proto.BucketPolicy)
	if err != nil {
		t.Fatal(err)
	}
	b, err := codec.Marshal(proto.PolicyVersion{Schema: proto.SchemaVersion, Version: v, Object: proto.WeightsObject(v), BatchID: batchID}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(testCtx(t), proto.KeyPolicyCurrent, b); err != nil {
		t.Fatal(err)
	}
}

type running struct {
	b    *replaybuffer.Buffer
	stop func()
}

func (m *mesh) startBuffer(t *testing.T, cfg replaybuffer.Config) *running {
	t.Helper()
	b, err := replaybuffer.New(cfg, replaybuffer.Deps{Conn: m.conn(t), Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	stop := bustest.Run(t, "replay-buffer", 10*time.Second, b.Run)
	eventually(t, 10*time.Second, "the buffer to run", b.Running)
	return &running{b: b, stop: stop}
}

// ep builds a valid one-turn episode k of group g.
func ep(g string, k, size int, startVersion int64) proto.Episode {
	return proto.Episode{Schema: proto.SchemaVersion, ID: fmt.Sprintf("%s-%d", g, k), GroupID: g, GroupSize: size,
		Task: "alfworld", Split: proto.SplitTrain, Status: proto.StatusCompleted, Reward: float64(k % 2),
		Turns:        []proto.Turn{{Observation: "o", Candidates: []string{"a", "b"}, Chosen: k % 2, LogProb: -0.69, Version: startVersion, Policy: proto.PolicyCurrent}},
		StartVersion: startVersion}
}

func infra(e proto.Episode) proto.Episode {
	e.InfraFailure, e.Status, e.Failure, e.Reward, e.Turns = true, proto.StatusError, "host gone", 0, nil
	return e
}

// publish stores an episode under msgID (its id if empty), as rollout does.
func (m *mesh) publish(t *testing.T, e proto.Episode, msgID string) {
	t.Helper()
	if msgID == "" {
		msgID = e.ID
	}
	data, err := codec.Marshal(e, proto.MaxEpisodeBytes)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bus.PublishOnce(testCtx(t), m.js, proto.SubjectEpisodes(e.Task), msgID, data); err != nil {
		t.Fatal(err)
	}
}

func (m *mesh) msgs(t *testing.T, stream string) uint64 {
	t.Helper()
	st, err := m.js.Stream(testCtx(t), stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

func (m *mesh) batch(t *testing.T, seq uint64) proto.Batch {
	t.Helper()
	st, err := m.js.Stream(testCtx(t), proto.StreamBatches)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := st.GetMsg(testCtx(t), seq)
	if err != nil {
		t.Fatal(err)
	}
	var b proto.Batch
	if err := codec.Unmarshal(raw.Data, &b); err != nil {
		t.Fatal(err)
	}
	if raw.Header.Get(nats.MsgIdHdr) != b.ID || !strings.HasPrefix(b.ID, "b-") {
		t.Fatalf("batch %q published with msg id %q", b.ID, raw.Header.Get(nats.MsgIdHdr))
	}
	return b
}

func ids(b proto.Batch) []string {
	out := make([]string, len(b.Episodes))
	for i, e := range b.Episodes {
		out[i] = e.ID
	}
	return out
}

func (m *mesh) refunded(t *testing.T) int64 {
	t.Helper()
	a, _, err := m.counter.Read(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	return a.Refunded
}

// pending is how many episodes the buffer holds without having acked them.
func (m *mesh) pending(t *testing.T) int {
	t.Helper()
	return m.backlog(t, proto.StreamEpisodes, proto.ConsumerReplayBuffer)
}

// backlog is how many messages a consumer has not acked (delivered or not).
func (m *mesh) backlog(t *testing.T, stream, consumer string) int {
	t.Helper()
	c, err := m.js.Consumer(testCtx(t), stream, consumer)
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	return info.NumAckPending + int(info.NumPending)
}

func cfg(batch int) replaybuffer.Config {
	return replaybuffer.Config{BatchSize: batch, Eta: 1, GroupTimeout: time.Minute}
}

func TestCompleteGroupsAreReleasedAsOneBatch(t *testing.T) {
	m := newMesh(t)
	m.setVersion(t, 0)
	r := m.startBuffer(t, cfg(4))
	// g1 completes first; with 2 usable episodes it waits for more, as does the incomplete g3.
	m.publish(t, ep("g1", 1, 2, 0), "")
	m.publish(t, ep("g1", 0, 2, 0), "")
	m.publish(t, ep("g3", 0, 2, 0), "")
	eventually(t, 10*time.Second, "3 episodes received", func() bool { return r.b.Stats().Received == 3 })
	m.publish(t, ep("g2", 0, 2, 0), "")
	m.publish(t, ep("g2", 1, 2, 0), "")
	eventually(t, 10*time.Second, "a batch", func() bool { return m.msgs(t, proto.StreamBatches) == 1 })
	b := m.batch(t, 1)
	if got, want := ids(b), []string{"g1-0", "g1-1", "g2-0", "g2-1"}; !slices.Equal(got, want) {
		t.Fatalf("batch holds %v, want %v (whole groups, by id: their seeds are equal)", got, want)
	}
	if b.TrainerVersion != 0 || b.Schema != proto.SchemaVersion || b.ReleasedAt == 0 {
		t.Fatalf("batch header = %+v", b)
	}
	// Batched episodes are acked; the member of the incomplete group is still held.
	eventually(t, 10*time.Second, "acks of the batched episodes", func() bool { return m.pending(t) == 1 })
	s := r.b.Stats()
	if s.Batches != 1 || s.Batched != 4 || s.Received != 5 {
		t.Fatalf("stats = %+v", s)
	}
	if m.refunded(t) != 0 {
		t.Fatalf("refunded %d for a batch of whole groups", m.refunded(t))
	}
}

func TestNothingIsReleasedBeforeTheFirstVersion(t *testing.T) {
	m := newMesh(t)
	r := m.startBuffer(t, cfg(2))
	m.publish(t, ep("g1", 0, 2, 0), "")
	m.publish(t, ep("g1", 1, 2, 0), "")
	eventually(t, 10*time.Second, "2 episodes received", func() bool { return r.b.Stats().Received == 2 })
	if n := m.msgs(t, proto.StreamBatches); n != 0 {
		t.Fatalf("%d batches released before the trainer published a version", n)
	}
	m.setVersion(t, 0)
	// The buffer decides again on its next event (a message or its 1s tick).
	eventually(t, 10*time.Second, "a batch once the version is known", func() bool { return m.msgs(t, proto.StreamBatches) == 1 })
	if b := m.batch(t, 1); len(b.Episodes) != 2 {
		t.Fatalf("batch holds %v", ids(b))
	}
}

func TestInfraFailureIsMaskedAndRefunded(t *testing.T) {
	m := newMesh(t)
	m.setVersion(t, 0)
	r := m.startBuffer(t, cfg(2))
	m.publish(t, ep("g1", 0, 3, 0), "")
	m.publish(t, infra(ep("g1", 1, 3, 0)), "")
	m.publish(t, ep("g1", 2, 3, 0), "")
	eventually(t, 10*time.Second, "a batch", func() bool { return m.msgs(t, proto.StreamBatches) == 1 })
	if got := ids(m.batch(t, 1)); !slices.Equal(got, []string{"g1-0", "g1-2"}) {
		t.Fatalf("batch holds %v, want the two usable members", got)
	}
	eventually(t, 10*time.Second, "the refund", func() bool { return m.refunded(t) == 1 })
	eventually(t, 10*time.Second, "acks", func() bool { return m.pending(t) == 0 })
	if s := r.b.Stats(); s.Masked != 1 || s.Batched != 2 {
		t.Fatalf("stats = %+v, want 1 masked, 2 batched", s)
	}
}

func TestGroupWithTooFewUsableMembersIsDropped(t *testing.T) {
	m := newMesh(t)
	m.setVersion(t, 0)
	r := m.startBuffer(t, cfg(2))
	m.publish(t, ep("g1", 0, 2, 0), "")
	m.publish(t, infra(ep("g1", 1, 2, 0)), "")
	eventually(t, 10*time.Second, "the whole group refunded", func() bool { return m.refunded(t) == 2 })
	eventually(t, 10*time.Second, "acks", func() bool { return m.pending(t) == 0 })
	if s := r.b.Stats(); s.DroppedGroup != 1 || s.Masked != 1 || s.Batches != 0 {
		t.Fatalf("stats = %+v, want 1 dropped with its group, 1 masked, no batch", s)
	}
	if n := m.msgs(t, proto.StreamBatches); n != 0 {
		t.Fatalf("%d batches for a group that cannot train", n)
	}
	// A late or repeated member of the dropped group does not bring it back.
	m.publish(t, ep("g1", 0, 2, 0), "g1-0-again")
	eventually(t, 10*time.Second, "the late member", func() bool { return r.b.Stats().Late == 1 })
	// The next good group still flows.
	m.publish(t, ep("g2", 0, 2, 0), "")
	m.publish(t, ep("g2", 1, 2, 0), "")
	eventually(t, 10*time.Second, "a batch", func() bool { return m.msgs(t, proto.StreamBatches) == 1 })
	if got := ids(m.batch(t, 1)); !slices.Equal(got, []string{"g2-0", "g2-1"}) {
		t.Fatalf("batch holds %v", got)
	}
}

// A group that cannot train is settled at once, and the members of a waiting group that cannot train are
// refunded at once, even while the usable episodes wait for a batch: holding their admissions would narrow
// the staleness gate, and with the gate shut the usable episodes the batch waits for could not start.
func TestWhatCannotTrainIsRefundedWhileABatchWaits(t *testing.T) {
	m := newMesh(t)
	m.setVersion(t, 0)
	r := m.startBuffer(t, cfg(4))
	m.publish(t, ep("g1", 0, 3, 0), "") // two usable, one masked: 2 < B, so it waits
	m.publish(t, ep("g1", 1, 3, 0), "")
	m.publish(t, infra(ep("g1", 2, 3, 0)), "")
	m.publish(t, infra(ep("g2", 0, 3, 0)), "") // every member masked
	m.publish(t, infra(ep("g2", 1, 3, 0)), "")
	m.publish(t, infra(ep("g2", 2, 3, 0)), "")
	eventually(t, 10*time.Second, "the masked members refunded", func() bool { return m.refunded(t) == 4 })
	eventually(t, 10*time.Second, "the masked group's members acked", func() bool { return m.pending(t) == 3 })
	if s := r.b.Stats(); s.Masked != 3 || s.Batches != 0 {
		t.Fatalf("stats = %+v, want the masked group's 3 counted, no batch yet", s)
	}
	// The waiting group goes with the next one, and its masked member is not refunded twice.
	m.publish(t, ep("g3", 0, 2, 0), "")
	m.publish(t, ep("g3", 1, 2, 0), "")
	eventually(t, 10*time.Second, "a batch", func() bool { return m.msgs(t, proto.StreamBatches) == 1 })
	if got := ids(m.batch(t, 1)); !slices.Equal(got, []string{"g1-0", "g1-1", "g3-0", "g3-1"}) {
		t.Fatalf("batch holds %v", got)
	}
	eventually(t, 10*time.Second, "acks", func() bool { return m.pending(t) == 0 })
	if got := m.refunded(t); got != 4 {
		t.Fatalf("refunded %d, want 4 (the masked group and g1's masked member, once)", got)
	}
	if s := r.b.Stats(); s.Masked != 4 || s.Batched != 4 {
		t.Fatalf("stats = %+v, want 4 masked, 4 batched", s)
	}
	if s := r.b.Stats(); !maps.Equal(s.BatchedByTask, map[string]replaybuffer.Tally{"alfworld": {Episodes: 4, Won: 2, Turns: 4, Groups: 2, Mixed: 2}}) {
		t.Fatalf("batched by task %v: want alfworld's 4 of one turn each, g1-1 and g3-1 won, so both groups mixed", s.BatchedByTask)
	}
}

func TestStaleEpisodesAreDropped(t *testing.T) {
	m := newMesh(t)
	m.setVersion(t, 5)
	r := m.startBuffer(t, cfg(2)) // eta 1: at version 5, start versions 4 and 5 are fresh
	// A whole group admitted at version 3 is stale.
	m.publish(t, ep("old", 0, 2, 3), "")
	m.publish(t, ep("old", 1, 2, 3), "")
	eventually(t, 10*time.Second, "the stale group refunded", func() bool { return m.refunded(t) == 2 })
	// In a mixed group only the stale member goes.
	m.publish(t, ep("mix", 0, 3, 4), "")
	m.publish(t, ep("mix", 1, 3, 3), "")
	m.publish(t, ep("mix", 2, 3, 5), "")
	eventually(t, 10*time.Second, "a batch", func() bool { return m.msgs(t, proto.StreamBatches) == 1 })
	b := m.batch(t, 1)
	if got := ids(b); !slices.Equal(got, []string{"mix-0", "mix-2"}) {
		t.Fatalf("batch holds %v, want the fresh members", got)
	}
	if b.TrainerVersion != 5 {
		t.Fatalf("batch trainer version %d, want 5", b.TrainerVersion)
	}
	eventually(t, 10*time.Second, "the stale member refunded", func() bool { return m.refunded(t) == 3 })
	// Counted just after the refund.
	eventually(t, 5*time.Second, "3 stale dropped, max staleness 1", func() bool {
		s := r.b.Stats()
		return s.DroppedStale == 3 && s.MaxStaleness == 1
	})
	// Odd members succeed (ep), each of one turn: old-1 and mix-1 among the 3 stale, neither mix-0 nor mix-2
	// among the batched. Of the two groups with stale members only old is mixed among them (mix-1 alone won).
	if s := r.b.Stats(); !maps.Equal(s.DroppedStaleByTask, map[string]replaybuffer.Tally{"alfworld": {Episodes: 3, Won: 2, Turns: 3, Groups: 2, Mixed: 1}}) ||
		!maps.Equal(s.BatchedByTask, map[string]replaybuffer.Tally{"alfworld": {Episodes: 2, Won: 0, Turns: 2, Groups: 1, Mixed: 0}}) {
		t.Fatalf("stale drops by task %v, batched %v: want alfworld's 3 stale (2 won) of 2 groups (1 mixed), 2 batched (none won) of 1 group, one turn each",
			s.DroppedStaleByTask, s.BatchedByTask)
	}
}

// closed is the admission closed mark (0 when none is written).
func (m *mesh) closed(t *testing.T) int64 {
	t.Helper()
	kv, err := m.js.KeyValue(testCtx(t), proto.BucketAdmission)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(testCtx(t), proto.KeyAdmissionClosed)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	var c proto.AdmissionClosed
	if err := codec.Unmarshal(e.Value(), &c); err != nil {
		t.Fatal(err)
	}
	return c.Below
}

// Each batch raises the closed mark past the groups it was the last to be able to take (admitted at its
// version - eta), so rollouts stop those still playing; judging each turn, the buffer writes no mark.
func TestBatchRaisesTheClosedMark(t *testing.T) {
	for _, turns := range []bool{false, true} {
		m := newMesh(t)
		m.setVersion(t, 5)
		c := cfg(2) // eta 1
		c.TurnStaleness = turns
		m.startBuffer(t, c)
		if got := m.closed(t); got != 0 {
			t.Fatalf("closed mark %d before any batch", got)
		}
		m.publish(t, ep("g", 0, 2, 5), "")
		m.publish(t, ep("g", 1, 2, 5), "")
		eventually(t, 10*time.Second, "a batch", func() bool { return m.msgs(t, proto.StreamBatches) == 1 })
		want := int64(5) // the batch for version 5 was the last that could take a group admitted at 4
		if turns {
			want = 0
			time.Sleep(200 * time.Millisecond) // a mark written after the batch would be there by now
		}
		eventually(t, 10*time.Second, "the closed mark", func() bool { return m.closed(t) == want })
	}
}

// A member its rollout stopped as stale (the rollout saw a closed mark or a version past its bound that this
// buffer's view does not show yet) takes its group with it: its members share the admission version no batch
// can take any more.
func TestStoppedMemberMakesItsGroupStale(t *testing.T) {
	m := newMesh(t)
	m.setVersion(t, 5)
	r := m.startBuffer(t, cfg(2)) // eta 1: at version 5, start version 4 is fresh
	stopped := ep("stop", 1, 3, 4)
	stopped.Status, stopped.Reward, stopped.Failure = proto.StatusStale, 0, "stopped at turn 1"
	m.publish(t, ep("stop", 0, 3, 4), "")
	m.publish(t, stopped, "")
	m.publish(t, ep("stop", 2, 3, 4), "")
	eventually(t, 10*time.Second, "the group refunded", func() bool { return m.refunded(t) == 3 })
	eventually(t, 5*time.Second, "3 stale dropped", func() bool { return r.b.Stats().DroppedStale == 3 })
	// The next group, admitted at 5, still trains.
	m.publish(t, ep("next", 0, 2, 5), "")
	m.publish(t, ep("next", 1, 2, 5), "")
	eventually(t, 10*time.Second, "a batch", func() bool { return m.msgs(t, proto.StreamBatches) == 1 })
	if got := ids(m.batch(t, 1)); !slices.Equal(got, []string{"next-0", "next-1"}) {
		t.Fatalf("batch holds %v, want only the next group", got)
	}
	eventually(t, 10*time.Second, "acks", func() bool { return m.pending(t) == 0 })
	if s := r.b.Stats(); s.DroppedStale != 3 || s.Batched != 2 || s.Masked != 0 {
		t.Fatalf("stats = %+v, want 3 stale, 2 batched", s)
	}
}

// Staleness is judged when a batch is released: a group that waited while the trainer moved on goes.
func TestGroupThatWaitedTooLongGoesStale(t *testing.T) {
	m := newMesh(t)
	m.setVersion(t, 0)
	r := m.startBuffer(t, replaybuffer.Config{BatchSize: 4, Eta: 0, GroupTimeout: time.Minute})
	m.publish(t, ep("early", 0, 2, 0), "")
	m.publish(t, ep("early", 1, 2, 0), "")
	eventually(t, 10*time.Second, "the early group", func() bool { return r.b.Stats().Received == 2 })
	m.setVersion(t, 1)
	// At version 1 the early group is stale: it is settled (refunded) at the buffer's next tick.
	eventually(t, 10*time.Second, "the stale group refunded at the next tick", func() bool { return m.refunded(t) == 2 })
	m.publish(t, ep("late1", 0, 2, 1), "")
	m.publish(t, ep("late1", 1, 2, 1), "")
	m.publish(t, ep("late2", 0, 2, 1), "")
	m.publish(t, ep("late2", 1, 2, 1), "")
	eventually(t, 10*time.Second, "a batch", func() bool { return m.msgs(t, proto.StreamBatches) == 1 })
	if got := ids(m.batch(t, 1)); !slices.Equal(got, []string{"late1-0", "late1-1", "late2-0", "late2-1"}) {
		t.Fatalf("batch holds %v", got)
	}
	if s := r.b.Stats(); s.DroppedStale != 2 {
		t.Fatalf("stats = %+v, want the early group's 2 episodes dropped as stale", s)
	}
}

func TestRepeatedEpisodesAreBatchedOnce(t *testing.T) {
	m := newMesh(t)
	m.setVersion(t, 0)
	r := m.startBuffer(t, cfg(2))
	// The same episode twice before its group completes (a redelivery, stored under a new msg id).
	m.publish(t, ep("g1", 0, 2, 0), "first")
	m.publish(t, ep("g1", 0, 2, 0), "second")
	eventually(t, 10*time.Second, "the duplicate", func() bool { return r.b.Stats().Duplicates == 1 })
	if n := m.msgs(t, proto.StreamBatches); n != 0 {
		t.Fatalf("a group of size 2 was released with one distinct member (%d batches)", n)
	}
	m.publish(t, ep("g1", 1, 2, 0), "")
	eventually(t, 10*time.Second, "a batch", func() bool { return m.msgs(t, proto.StreamBatches) == 1 })
	first := m.batch(t, 1)
	if got := ids(first); !slices.Equal(got, []string{"g1-0", "g1-1"}) {
		t.Fatalf("batch holds %v", got)
	}
	// After the release, a repeat is late: acked, not batched.
	m.publish(t, ep("g1", 1, 2, 0), "third")
	eventually(t, 10*time.Second, "the late repeat", func() bool { return r.b.Stats().Late == 1 })

	// A restarted buffer has forgotten the group; if its episodes come again it releases the same batch
	// id, which the batches stream stores once.
	r.stop()
	r2 := m.startBuffer(t, cfg(2))
	m.publish(t, ep("g1", 0, 2, 0), "fourth")
	m.publish(t, ep("g1", 1, 2, 0), "fifth")
	eventually(t, 10*time.Second, "the re-release", func() bool { return r2.b.Stats().Batches == 1 })
	if n := m.msgs(t, proto.StreamBatches); n != 1 {
		t.Fatalf("batches stream holds %d batches, want the group once", n)
	}
	if m.refunded(t) != 0 {
		t.Fatalf("refunded %d for repeats", m.refunded(t))
	}
}

// A second stream message carrying an episode the buffer already holds (the same episode published again
// after the stream's dedup window, or under another msg id) must be settled like the first: once the group
// is released, both messages are acked. Today the held member is replaced by the newer delivery and the
// older message is never acked: it stays pending until its ack wait (30s) runs out, is redelivered, and
// is then counted a second time (received, late).
func TestDuplicateOfHeldEpisodeIsAcked(t *testing.T) {
	m := newMesh(t)
	m.setVersion(t, 0)
	r := m.startBuffer(t, cfg(2))
	m.publish(t, ep("g1", 0, 2, 0), "first")
	m.publish(t, ep("g1", 0, 2, 0), "second")
	eventually(t, 10*time.Second, "the duplicate", func() bool { return r.b.Stats().Duplicates == 1 })
	m.publish(t, ep("g1", 1, 2, 0), "")
	eventually(t, 10*time.Second, "a batch", func() bool { return m.msgs(t, proto.StreamBatches) == 1 })
	// Well under the buffer's 30s ack wait: every message of the released group is acked at release.
	eventually(t, 5*time.Second, "acks of both deliveries of g1-0", func() bool { return m.pending(t) == 0 })
}

func TestMalformedEpisodesAreDeadLettered(t *testing.T) {
	m := newMesh(t)
	m.setVersion(t, 0)
	r := m.startBuffer(t, cfg(2))
	nan := ep("g1", 0, 2, 0)
	nan.Reward = math.NaN()
	noGroup := ep("g1", 1, 2, 0)
	noGroup.GroupID = ""
	tests := []struct {
		name           string
		givenData      []byte
		expectedReason string
	}{
		{"not msgpack", []byte("{\"json\": true}"), proto.ErrMalformed.Error()},
		{"NaN reward", mustMarshal(t, nan), proto.ErrBadNumber.Error()},
		{"no group", mustMarshal(t, noGroup), proto.ErrMalformed.Error()},
	}
	for i, tc := range tests {
		if _, err := bus.PublishOnce(testCtx(t), m.js, proto.SubjectEpisodes("alfworld"), "bad-"+tc.name, tc.givenData); err != nil {
			t.Fatal(err)
		}
		seq := uint64(i + 1)
		eventually(t, 10*time.Second, "the dead letter of "+tc.name, func() bool { return m.msgs(t, proto.StreamDeadLetter) == seq })
		st, err := m.js.Stream(testCtx(t), proto.StreamDeadLetter)
		if err != nil {
			t.Fatal(err)
		}
		dl, err := st.GetMsg(testCtx(t), seq)
		if err != nil {
			t.Fatal(err)
		}
		if dl.Subject != proto.SubjectDeadLetterPrefix+"replay-buffer" || string(dl.Data) != string(tc.givenData) ||
			dl.Header.Get(proto.HeaderDeadLetterSubject) != proto.SubjectEpisodes("alfworld") {
			t.Fatalf("%s: dead letter on %s with headers %v", tc.name, dl.Subject, dl.Header)
		}
		if reason := dl.Header.Get(proto.HeaderDeadLetterReason); !strings.HasPrefix(reason, tc.expectedReason) {
			t.Fatalf("%s: reason %q, want it to start with %q", tc.name, reason, tc.expectedReason)
		}
	}
	if s := r.b.Stats(); s.DeadLettered != 3 || s.Received != 0 {
		t.Fatalf("stats = %+v, want 3 dead-lettered, none received", s)
	}
	m.publish(t, ep("g1", 0, 2, 0), "")
	m.publish(t, ep("g1", 1, 2, 0), "")
	eventually(t, 10*time.Second, "a batch after the bad episodes", func() bool { return m.msgs(t, proto.StreamBatches) == 1 })
	eventually(t, 10*time.Second, "nothing left pending", func() bool { return m.pending(t) == 0 })
}

func TestGroupTimeoutReleasesWhatArrived(t *testing.T) {
	m := newMesh(t)
	m.setVersion(t, 0)
	r := m.startBuffer(t, replaybuffer.Config{BatchSize: 2, Eta: 1, GroupTimeout: time.Second})
	start := time.Now()
	m.publish(t, ep("g1", 0, 3, 0), "")
	m.publish(t, ep("g1", 1, 3, 0), "")
	eventually(t, 10*time.Second, "the timed-out group's batch", func() bool { return m.msgs(t, proto.StreamBatches) == 1 })
	if waited := time.Since(start); waited < time.Second {
		t.Fatalf("released after %v, before the 1s group timeout", waited)
	}
	if got := ids(m.batch(t, 1)); !slices.Equal(got, []string{"g1-0", "g1-1"}) {
		t.Fatalf("batch holds %v", got)
	}
	eventually(t, 10*time.Second, "the missing member refunded", func() bool { return m.refunded(t) == 1 })
	eventually(t, 5*time.Second, "1 missing counted", func() bool { return r.b.Stats().Missing == 1 })
	// The missing member arriving late is acked and not batched.
	m.publish(t, ep("g1", 2, 3, 0), "")
	eventually(t, 10*time.Second, "the late member", func() bool { return r.b.Stats().Late == 1 })
	eventually(t, 10*time.Second, "nothing left pending", func() bool { return m.pending(t) == 0 })
	if n := m.msgs(t, proto.StreamBatches); n != 1 {
		t.Fatalf("%d batches, want 1", n)
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
	m := newMesh(t)
	nc := m.conn(t)
	tests := []struct {
		name       string
		givenCfg   replaybuffer.Config
		givenConn  *nats.Conn
		expectedOK bool
	}{
		{"defaults", replaybuffer.Config{}, nc, true},
		{"shortest group timeout", replaybuffer.Config{GroupTimeout: time.Second}, nc, true},
		{"group timeout under 1s", replaybuffer.Config{GroupTimeout: 500 * time.Millisecond}, nc, false},
		{"shortest replica timeout", replaybuffer.Config{ReplicaTimeout: time.Second}, nc, true},
		{"replica timeout off", replaybuffer.Config{ReplicaTimeout: -1}, nc, true},
		{"replica timeout under 1s", replaybuffer.Config{ReplicaTimeout: 500 * time.Millisecond}, nc, false},
		{"negative batch size", replaybuffer.Config{BatchSize: -1}, nc, false},
		{"negative eta", replaybuffer.Config{Eta: -1}, nc, false},
		{"negative min group", replaybuffer.Config{MinGroup: -2}, nc, false},
		{"lead", replaybuffer.Config{Lead: 50 * time.Millisecond, MaxQueued: 1}, nc, true},
		{"negative lead", replaybuffer.Config{Lead: -time.Millisecond}, nc, false},
		{"lead over a minute", replaybuffer.Config{Lead: 2 * time.Minute}, nc, false},
		{"lead without a queue bound", replaybuffer.Config{Lead: time.Millisecond, MaxQueued: -1}, nc, false},
		{"no connection", replaybuffer.Config{}, nil, false},
		{"connection that buffers while disconnected", replaybuffer.Config{}, m.bufferedConn(t), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := replaybuffer.New(tc.givenCfg, replaybuffer.Deps{Conn: tc.givenConn, Log: zerolog.Nop()})
			if (err == nil) != tc.expectedOK {
				t.Fatalf("New error = %v, want ok %v", err, tc.expectedOK)
			}
		})
	}
}

// The missing members of a timed-out group are refunded when it times out, even when what arrived is too
// little for a batch: the replica that would have played them is gone, and the batch can fill only with
// episodes that the refunded room lets other replicas start. A member that arrives after its group timed
// out, while the group waits for its batch, is late: it does not open a second group of that id, which
// would time out too and give its admissions back again.
func TestTimedOutGroupIsRefundedBeforeItsBatch(t *testing.T) {
	m := newMesh(t)
	m.setVersion(t, 0)
	r := m.startBuffer(t, replaybuffer.Config{BatchSize: 4, Eta: 1, GroupTimeout: time.Second})
	m.publish(t, ep("g1", 0, 8, 0), "")
	m.publish(t, ep("g1", 1, 8, 0), "")
	m.publish(t, ep("g1", 2, 8, 0), "")
	eventually(t, 10*time.Second, "the 5 missing members refunded", func() bool { return m.refunded(t) == 5 })
	if n := m.msgs(t, proto.StreamBatches); n != 0 {
		t.Fatalf("%d batches from 3 usable episodes, want none (B = 4)", n)
	}
	m.publish(t, ep("g1", 3, 8, 0), "")
	eventually(t, 10*time.Second, "the late member counted", func() bool { return r.b.Stats().Late == 1 })
	time.Sleep(2500 * time.Millisecond) // past another group timeout
	if got := m.refunded(t); got != 5 {
		t.Fatalf("refunded %d after a late member, want 5", got)
	}
	m.publish(t, ep("g2", 0, 2, 0), "")
	m.publish(t, ep("g2", 1, 2, 0), "")
	eventually(t, 10*time.Second, "a batch", func() bool { return m.msgs(t, proto.StreamBatches) == 1 })
	if got := ids(m.batch(t, 1)); !slices.Equal(got, []string{"g1-0", "g1-1", "g1-2", "g2-0", "g2-1"}) {
		t.Fatalf("batch holds %v", got)
	}
	eventually(t, 10*time.Second, "acks", func() bool { return m.pending(t) == 0 })
	if got := m.refunded(t); got != 5 {
		t.Fatalf("refunded %d, want 5 (once)", got)
	}
	if s := r.b.Stats(); s.Missing != 5 || s.Batched != 5 || s.Late != 1 || s.PendingGroups != 0 {
		t.Fatalf("stats = %+v, want 5 missing, 5 batched, 1 late, no group pending", s)
	}
}

// With TurnStaleness a member admitted too long ago is usable while one of its turns is within the bound;
// a group that trains takes its members with none along for the baseline (the trainer counts them stale,
// so no admission is given back for them), and a group with no usable member goes stale whole.
func TestTurnStalenessKeepsMembersWithRecentTurns(t *testing.T) {
	m := newMesh(t)
	m.setVersion(t, 5)
	c := cfg(2) // eta 1: at version 5, turns of versions 4 and 5 are within the bound
	c.TurnStaleness = true
	r := m.startBuffer(t, c)
	turns := func(e proto.Episode, versions ...int64) proto.Episode {
		e.Turns = nil
		for _, v := range versions {
			e.Turns = append(e.Turns, proto.Turn{Observation: "o", Candidates: []string{"a", "b"}, LogProb: -0.69, Version: v, Policy: proto.PolicyCurrent})
		}
		return e
	}
	m.publish(t, ep("old", 0, 2, 3), "")
	m.publish(t, ep("old", 1, 2, 3), "")
	eventually(t, 10*time.Second, "the stale group refunded", func() bool { return m.refunded(t) == 2 })
	m.publish(t, turns(ep("late", 0, 3, 3), 3, 4), "")
	m.publish(t, turns(ep("late", 1, 3, 3), 3), "")
	m.publish(t, turns(ep("late", 2, 3, 3), 3, 3, 5), "")
	eventually(t, 10*time.Second, "a batch", func() bool { return m.msgs(t, proto.StreamBatches) == 1 })
	if got := ids(m.batch(t, 1)); !slices.Equal(got, []string{"late-0", "late-2", "late-1"}) {
		t.Fatalf("batch holds %v, want the members with a recent turn, then late-1 for the baseline", got)
	}
	eventually(t, 5*time.Second, "the batch counted", func() bool { return r.b.Stats().Batched == 2 })
	s := r.b.Stats()
	if s.DroppedStale != 2 || s.Baseline != 1 || s.MaxStaleness != 1 || m.refunded(t) != 2 {
		t.Fatalf("stats %+v, refunded %d: want old's 2 dropped stale, late-1 in the baseline, max staleness 1 (late-0 from its turn at 4), 2 refunded",
			s, m.refunded(t))
	}
	// Odd members won: old-1 and late-1 among the stale (late-1 sent along), neither late-0 nor late-2.
	if !maps.Equal(s.DroppedStaleByTask, map[string]replaybuffer.Tally{"alfworld": {Episodes: 3, Won: 2, Turns: 3, Groups: 2, Mixed: 1}}) ||
		!maps.Equal(s.BatchedByTask, map[string]replaybuffer.Tally{"alfworld": {Episodes: 2, Won: 0, Turns: 5, Groups: 1, Mixed: 0}}) {
		t.Fatalf("stale by task %v, batched %v", s.DroppedStaleByTask, s.BatchedByTask)
	}
}

// big is episode k of group g with an observation of about n bytes.
func big(g string, k, size, n int) proto.Episode {
	e := ep(g, k, size, 0)
	e.Turns[0].Observation = strings.Repeat("x", n)
	return e
}

// A batch stops at the byte limit (its train batch must fit proto.MaxBatchBytes): the groups past it wait
// for the next batch, and the batch goes without waiting for B episodes it could not carry.
func TestBatchStopsAtTheByteLimit(t *testing.T) {
	m := newMesh(t)
	m.setVersion(t, 0)
	r := m.startBuffer(t, cfg(12))
	for g := range 5 { // 5 groups of 2 episodes of 900 kB: 9 MB, more than one batch can carry
		for k := range 2 {
			m.publish(t, big(fmt.Sprintf("g%d", g), k, 2, 900<<10), "")
		}
	}
	eventually(t, 20*time.Second, "a batch", func() bool { return m.msgs(t, proto.StreamBatches) == 1 })
	b := m.batch(t, 1)
	if len(b.Episodes) != 8 {
		t.Fatalf("batch holds %d episodes (%v), want the 4 groups that fit", len(b.Episodes), ids(b))
	}
	if n := len(mustMarshal(t, b)); n > proto.MaxBatchBytes-8*len(b.Episodes) {
		t.Fatalf("batch is %d bytes: its train batch would not fit %d", n, proto.MaxBatchBytes)
	}
	if s := r.b.Stats(); s.Batched != 8 || s.Oversized != 0 || s.Received != 10 {
		t.Fatalf("stats = %+v, want 10 received, 8 batched, none oversized", s)
	}
	// The fifth group is kept for the next batch (with fewer than B, it waits for more).
	m.publish(t, ep("g9", 0, 2, 0), "")
	m.publish(t, ep("g9", 1, 2, 0), "")
	eventually(t, 10*time.Second, "the new group received", func() bool { return r.b.Stats().Received == 12 })
	if n := m.msgs(t, proto.StreamBatches); n != 1 {
		t.Fatalf("%d batches, want the fifth group to wait for B", n)
	}
}

// A group whose members alone would not fit a batch can never train: it is dropped, counted and its
// admissions given back, and the groups after it flow.
func TestGroupTooLargeForAnyBatchIsDropped(t *testing.T) {
	m := newMesh(t)
	m.setVersion(t, 0)
	r := m.startBuffer(t, cfg(2))
	for k := range 10 { // 10 episodes of 900 kB in one group
		m.publish(t, big("huge", k, 10, 900<<10), "")
	}
	eventually(t, 20*time.Second, "the group refunded", func() bool { return m.refunded(t) == 10 })
	eventually(t, 10*time.Second, "acks", func() bool { return m.pending(t) == 0 })
	if s := r.b.Stats(); s.Oversized != 10 || s.DroppedGroup != 0 || s.Batches != 0 {
		t.Fatalf("stats = %+v, want 10 oversized, none dropped as small, no batch", s)
	}
	m.publish(t, ep("g1", 0, 2, 0), "")
	m.publish(t, ep("g1", 1, 2, 0), "")
	eventually(t, 10*time.Second, "a batch after the oversized group", func() bool { return m.msgs(t, proto.StreamBatches) == 1 })
	if got := ids(m.batch(t, 1)); !slices.Equal(got, []string{"g1-0", "g1-1"}) {
		t.Fatalf("batch holds %v", got)
	}
}

// A member whose group size disagrees with its group's is refused: the group's size
// decides the admissions given back for it. The group goes on without it (and times out for it).
func TestMemberDisagreeingWithItsGroupIsDeadLettered(t *testing.T) {
	m := newMesh(t)
	m.setVersion(t, 0)
	r := m.startBuffer(t, replaybuffer.Config{BatchSize: 2, Eta: 1, GroupTimeout: 2 * time.Second})
	m.publish(t, ep("g1", 0, 3, 0), "")
	m.publish(t, ep("g1", 1, 1<<12, 0), "")
	m.publish(t, ep("g1", 2, 3, 0), "")
	eventually(t, 10*time.Second, "the dead letter", func() bool { return m.msgs(t, proto.StreamDeadLetter) == 1 })
	st, err := m.js.Stream(testCtx(t), proto.StreamDeadLetter)
	if err != nil {
		t.Fatal(err)
	}
	dl, err := st.GetMsg(testCtx(t), 1)
	if err != nil {
		t.Fatal(err)
	}
	if reason := dl.Header.Get(proto.HeaderDeadLetterReason); !strings.HasPrefix(reason, proto.ErrMalformed.Error()) || !strings.Contains(reason, "g1-1") {
		t.Fatalf("reason %q, want a malformed g1-1", reason)
	}
	// The group times out with its two good members: they train, and only the refused one's admission is
	// given back, not the 4096 it claimed.
	eventually(t, 15*time.Second, "a batch", func() bool { return m.msgs(t, proto.StreamBatches) == 1 })
	if got := ids(m.batch(t, 1)); !slices.Equal(got, []string{"g1-0", "g1-2"}) {
		t.Fatalf("batch holds %v", got)
	}
	eventually(t, 10*time.Second, "the refund", func() bool { return m.refunded(t) == 1 })
	// Counted once the refund is recorded (a GroupRefund), just after it lands.
	eventually(t, 5*time.Second, "the missing member counted", func() bool { return r.b.Stats().Missing == 1 })
	if s := r.b.Stats(); s.DeadLettered != 1 || s.Batched != 2 || s.Missing != 1 {
		t.Fatalf("stats = %+v, want 1 dead-lettered, 2 batched, 1 missing", s)
	}
}

// A refund that fails leaves the groups it was for unacked, so that a restart would still account for them,
// and is tried again until it lands; then they are acked and counted.
func TestFailedRefundHoldsItsGroupsUntilItLands(t *testing.T) {
	m := newMesh(t)
	m.setVersion(t, 0)
	r := m.startBuffer(t, cfg(2))
	if err := m.js.DeleteKeyValue(testCtx(t), proto.BucketAdmission); err != nil {
		t.Fatal(err)
	}
	m.publish(t, ep("g1", 0, 2, 0), "")
	m.publish(t, infra(ep("g1", 1, 2, 0)), "")
	eventually(t, 10*time.Second, "a failed refund", func() bool { return r.b.Stats().RefundErrors >= 1 })
	if n := m.pending(t); n != 2 {
		t.Fatalf("%d episodes pending after the failed refund, want both held unacked", n)
	}
	if err := bus.EnsureTopology(testCtx(t), m.js, 1); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the refund once the bucket is back", func() bool { return m.refunded(t) == 2 })
	eventually(t, 10*time.Second, "acks", func() bool { return m.pending(t) == 0 })
	if s := r.b.Stats(); s.DroppedGroup != 1 || s.Masked != 1 {
		t.Fatalf("stats = %+v, want the group counted once: 1 dropped with its group, 1 masked", s)
	}
}

// refundRecord is what the GroupRefund record of group g says was given back for it (-1: no record).
func (m *mesh) refundRecord(t *testing.T, g string) int {
	t.Helper()
	kv, err := m.js.KeyValue(testCtx(t), proto.BucketRefunds)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(testCtx(t), proto.RefundKey(g))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return -1
	}
	if err != nil {
		t.Fatal(err)
	}
	var r proto.GroupRefund
	if err := codec.Unmarshal(e.Value(), &r); err != nil {
		t.Fatal(err)
	}
	return r.Refunded
}

// What a buffer gives back for a group is recorded before its members are acked, so the buffer that gets
// them again after a takeover does not give the same admissions back twice.
func TestRefundsAreRecordedAndNotGivenBackTwiceAfterATakeover(t *testing.T) {
	m := newMesh(t)
	m.setVersion(t, 0)
	r1 := m.startBuffer(t, cfg(4))
	m.publish(t, ep("g1", 0, 3, 0), "") // two usable, one masked: 2 < B, so it waits, its masked member refunded
	m.publish(t, ep("g1", 1, 3, 0), "")
	m.publish(t, infra(ep("g1", 2, 3, 0)), "")
	m.publish(t, infra(ep("g2", 0, 2, 0)), "") // nothing to train: settled, both refunded
	m.publish(t, infra(ep("g2", 1, 2, 0)), "")
	eventually(t, 10*time.Second, "the masked members refunded", func() bool { return m.refunded(t) == 3 })
	eventually(t, 10*time.Second, "their records", func() bool { return m.refundRecord(t, "g1") == 1 && m.refundRecord(t, "g2") == 2 })
	if got := m.refundRecord(t, "g3"); got != -1 {
		t.Fatalf("a record of %d for a group never seen", got)
	}

	// The buffer stops with g1 waiting; the next one is delivered its members again (here published again
	// under new message ids, as a redelivery after the ack wait would bring them).
	r1.stop()
	r2 := m.startBuffer(t, cfg(4))
	m.publish(t, ep("g1", 0, 3, 0), "again-0")
	m.publish(t, ep("g1", 1, 3, 0), "again-1")
	m.publish(t, infra(ep("g1", 2, 3, 0)), "again-2")
	m.publish(t, ep("g3", 0, 2, 0), "")
	m.publish(t, ep("g3", 1, 2, 0), "")
	eventually(t, 10*time.Second, "a batch", func() bool { return m.msgs(t, proto.StreamBatches) == 1 })
	if got := ids(m.batch(t, 1)); !slices.Equal(got, []string{"g1-0", "g1-1", "g3-0", "g3-1"}) {
		t.Fatalf("batch holds %v", got)
	}
	eventually(t, 10*time.Second, "the batched group settled", func() bool { return r2.b.Stats().Masked == 1 })
	if got, s := m.refunded(t), r2.b.Stats(); got != 3 || s.RefundsRecovered != 1 || s.RefundRecordErrors != 0 {
		t.Fatalf("refunded %d, recovered %d, record errors %d: want 3 (g1's masked member once), 1, 0", got, s.RefundsRecovered, s.RefundRecordErrors)
	}
	if got := m.refundRecord(t, "g1"); got != 1 {
		t.Fatalf("g1's record says %d, want 1", got)
	}
}
