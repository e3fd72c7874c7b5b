package trainer_test

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/services/trainer"
	"github.com/jetrl/jetrl/shared/admission"
	"github.com/jetrl/jetrl/shared/bus"
	"github.com/jetrl/jetrl/shared/bus/bustest"
	"github.com/jetrl/jetrl/shared/codec"
	"github.com/jetrl/jetrl/shared/policy"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

var eventually = bustest.Eventually

var testCtx = bustest.Ctx

// mesh is an embedded server with the mesh's topology, seen from the test's own connection.
type mesh struct {
	url string
	js  jetstream.JetStream
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
	return m
}

func (m *mesh) conn(t *testing.T) *nats.Conn {
	t.Helper()
	nc, err := bus.Connect(testCtx(t), m.url, "trainer-test", zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func testConfig(eta int) trainer.Config {
	return trainer.Config{Model: policy.Config{Bits: 10, Seed: 5}, Loss: trainer.Objective{Clip: 0.2, DualClip: 3}, Epochs: 2, Eta: eta}
}

// running is one trainer run; stop cancels it and waits for Run to return.
type running struct {
	tr   *trainer.Trainer
	stop func()
}

func (m *mesh) startTrainer(t *testing.T, cfg trainer.Config) *running {
	t.Helper()
	tr, err := trainer.New(cfg, trainer.Deps{Conn: m.conn(t), Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	stop := bustest.Run(t, "trainer", 10*time.Second, tr.Run)
	eventually(t, 10*time.Second, "the trainer to run", tr.Running)
	return &running{tr: tr, stop: stop}
}

// current reads the version record and checks it against the weights it names.
func (m *mesh) current(t *testing.T) (proto.PolicyVersion, []byte) {
	t.Helper()
	ctx := testCtx(t)
	kv, err := m.js.KeyValue(ctx, proto.BucketPolicy)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, proto.KeyPolicyCurrent)
	if err != nil {
		t.Fatal(err)
	}
	var rec proto.PolicyVersion
	if err := codec.Unmarshal(e.Value(), &rec); err != nil {
		t.Fatal(err)
	}
	obj, err := m.js.ObjectStore(ctx, proto.BucketWeights)
	if err != nil {
		t.Fatal(err)
	}
	w, err := obj.GetBytes(ctx, rec.Object)
	if err != nil {
		t.Fatalf("weights %s of version %d: %v", rec.Object, rec.Version, err)
	}
	sum := sha256.Sum256(w)
	if rec.Object != proto.WeightsObject(rec.Version) || rec.SHA256 != hex.EncodeToString(sum[:]) || rec.Size != int64(len(w)) {
		t.Fatalf("version record %+v does not match its weights (%d bytes, sha256 %x)", rec, len(w), sum)
	}
	return rec, w
}

func (m *mesh) version(t *testing.T) int64 {
	rec, _ := m.current(t)
	return rec.Version
}

func (m *mesh) model(t *testing.T) *policy.Model {
	t.Helper()
	_, w := m.current(t)
	pm, err := policy.Load(w)
	if err != nil {
		t.Fatal(err)
	}
	return pm
}

func (m *mesh) publish(t *testing.T, msgID string, data []byte) {
	t.Helper()
	if _, err := bus.PublishOnce(testCtx(t), m.js, proto.SubjectTrain, msgID, data); err != nil {
		t.Fatal(err)
	}
}

func (m *mesh) publishBatch(t *testing.T, msgID string, tb proto.TrainBatch) {
	t.Helper()
	tb.Schema = proto.SchemaVersion
	data, err := codec.Marshal(tb, proto.MaxBatchBytes)
	if err != nil {
		t.Fatal(err)
	}
	m.publish(t, msgID, data)
}

// checkpointBytes reads the stored checkpoint object.
func (m *mesh) checkpointBytes(t *testing.T) []byte {
	t.Helper()
	obj, err := m.js.ObjectStore(testCtx(t), proto.BucketCheckpoints)
	if err != nil {
		t.Fatal(err)
	}
	b, err := obj.GetBytes(testCtx(t), proto.KeyCheckpoint)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// lastStep reads the last step event stored, and its message id.
func (m *mesh) lastStep(t *testing.T) (proto.TrainStep, string) {
	t.Helper()
	ev, err := m.js.Stream(testCtx(t), proto.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := ev.GetLastMsgForSubject(testCtx(t), proto.SubjectEventTrainStep)
	if err != nil {
		t.Fatal(err)
	}
	var step proto.TrainStep
	if err := codec.Unmarshal(raw.Data, &step); err != nil {
		t.Fatal(err)
	}
	return step, raw.Header.Get(nats.MsgIdHdr)
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

var candidates = []string{"take_action go to fridge 1", "take_action go to countertop 1", "take_action look", "take_action open fridge 1"}

// episode builds a train episode whose behaviour log-probabilities come from pm, with one advantage per turn.
func episode(pm *policy.Model, id, group string, startVersion int64, chosen []int, adv float64) proto.TrainEpisode {
	ep := proto.Episode{Schema: proto.SchemaVersion, ID: id, GroupID: group, GroupSize: 2, Task: "alfworld",
		Split: proto.SplitTrain, Instruction: "Your task is to: put a apple in fridge 1.", Status: proto.StatusCompleted,
		StartVersion: startVersion}
	for i, c := range chosen {
		ep.Turns = append(ep.Turns, proto.Turn{Observation: fmt.Sprintf("You are at step %d.", i), Candidates: candidates,
			Chosen: c, Version: startVersion, Policy: proto.PolicyCurrent})
	}
	advs := make([]float64, len(chosen))
	for i, in := range policy.InputsFromEpisode(&ep) {
		ep.Turns[i].LogProb = pm.LogProb(in, chosen[i])
		advs[i] = adv
	}
	return proto.TrainEpisode{Episode: ep, Advantages: advs}
}

// group is a win (choosing candidate 0) and a loss (choosing 2) of one instance.
func group(pm *policy.Model, id string, startVersion int64) []proto.TrainEpisode {
	return []proto.TrainEpisode{
		episode(pm, id+"-0", id, startVersion, []int{0, 0}, 1),
		episode(pm, id+"-1", id, startVersion, []int{2, 2, 2}, -1),
	}
}

func TestPublishesVersionZeroOnStart(t *testing.T) {
	m := newMesh(t)
	r := m.startTrainer(t, testConfig(1))
	rec, w := m.current(t)
	if rec.Version != 0 || rec.EpisodesTrained != 0 || rec.BatchID != "" || rec.PublishedAt == 0 {
		t.Fatalf("initial version record = %+v", rec)
	}
	pm, err := policy.Load(w)
	if err != nil {
		t.Fatal(err)
	}
	if pm.Bits != 10 || pm.NumParams() != 1<<10 {
		t.Fatalf("published model has %d bits, want the configured 10", pm.Bits)
	}
	if s := r.tr.Stats(); s.Version != 0 || s.Resumed {
		t.Fatalf("stats = %+v, want version 0, not resumed", s)
	}
	obj, err := m.js.ObjectStore(testCtx(t), proto.BucketCheckpoints)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := obj.GetInfo(testCtx(t), proto.KeyCheckpoint); err != nil {
		t.Fatalf("no checkpoint after start: %v", err)
	}
}

func TestApplyRedeliverResume(t *testing.T) {
	m := newMesh(t)
	cfg := testConfig(0)
	r := m.startTrainer(t, cfg)
	v0 := m.model(t)
	rec0, _ := m.current(t)

	// Apply one batch: the version moves to 1 and the weights move toward the win.
	tb1 := proto.TrainBatch{ID: "tb-1", Episodes: group(v0, "g1", 0), TrainerVersion: 0}
	m.publishBatch(t, "tb-1", tb1)
	eventually(t, 10*time.Second, "version 1", func() bool { return m.version(t) == 1 })
	// The step event and the counters follow the version record.
	eventually(t, 10*time.Second, "the batch to be counted", func() bool { return r.tr.Stats().Batches == 1 })
	rec1, w1 := m.current(t)
	if rec1.BatchID != "tb-1" || rec1.EpisodesTrained != 2 {
		t.Fatalf("version 1 record = %+v", rec1)
	}
	if rec1.SHA256 == rec0.SHA256 {
		t.Fatal("weights of version 1 equal those of version 0")
	}
	v1 := m.model(t)
	win := policy.InputsFromEpisode(&tb1.Episodes[0].Episode)[0]
	loss := policy.InputsFromEpisode(&tb1.Episodes[1].Episode)[0]
	if v1.LogProb(win, 0) <= v0.LogProb(win, 0) || v1.LogProb(loss, 2) >= v0.LogProb(loss, 2) {
		t.Fatalf("update went the wrong way: win %v→%v, loss %v→%v",
			v0.LogProb(win, 0), v1.LogProb(win, 0), v0.LogProb(loss, 2), v1.LogProb(loss, 2))
	}
	s := r.tr.Stats()
	if s.Version != 1 || s.Batches != 1 || s.EpisodesTrained != 2 || s.LastBatchID != "tb-1" {
		t.Fatalf("stats after one batch = %+v", s)
	}
	// The step event is stored once per version.
	if step, msgID := m.lastStep(t); step.Version != 1 || step.BatchID != "tb-1" || step.Episodes != 2 || step.EpisodesTrained != 2 ||
		msgID != proto.TrainStepMsgID(1) {
		t.Fatalf("step event = %+v, msg id %q", step, msgID)
	}

	// The same batch again (a redelivery after the checkpoint: a new stream message, same batch id) is
	// acknowledged without a second update.
	m.publishBatch(t, "tb-1-redelivered", tb1)
	eventually(t, 10*time.Second, "the duplicate to be seen", func() bool { return r.tr.Stats().Duplicates == 1 })
	if rec, _ := m.current(t); rec.Version != 1 || rec.SHA256 != rec1.SHA256 || rec.PublishedAt != rec1.PublishedAt {
		t.Fatalf("after a redelivery the record is %+v, want version 1 unchanged", rec)
	}
	if n := m.msgs(t, proto.StreamEvents); n != 1 {
		t.Fatalf("events stream holds %d step events, want 1", n)
	}

	// Restart: a new trainer resumes from the checkpoint and does not republish the same version.
	r.stop()
	r2 := m.startTrainer(t, cfg)
	s = r2.tr.Stats()
	if !s.Resumed || s.Version != 1 || s.EpisodesTrained != 2 || s.Batches != 1 || s.LastBatchID != "tb-1" {
		t.Fatalf("stats after restart = %+v, want resumed at version 1 with 2 episodes trained", s)
	}
	if rec, w := m.current(t); rec.Version != 1 || rec.PublishedAt != rec1.PublishedAt || string(w) != string(w1) {
		t.Fatalf("restart republished: record %+v", rec)
	}
	m.publishBatch(t, "tb-1-after-restart", tb1)
	eventually(t, 10*time.Second, "the duplicate after restart", func() bool { return r2.tr.Stats().Duplicates == 1 })
	if v := m.version(t); v != 1 {
		t.Fatalf("version %d after a redelivery to the resumed trainer, want 1", v)
	}

	// With eta 0 at version 1, episodes admitted at version 0 are stale: not trained, counted.
	tb2 := proto.TrainBatch{ID: "tb-2", Episodes: group(v0, "g2", 0), TrainerVersion: 1}
	m.publishBatch(t, "tb-2", tb2)
	eventually(t, 10*time.Second, "the stale batch to be consumed", func() bool { return r2.tr.Stats().Batches == 2 })
	s = r2.tr.Stats()
	if s.StaleDropped != 2 || s.EpisodesTrained != 2 {
		t.Fatalf("stats after a stale batch = %+v, want 2 stale dropped and still 2 trained", s)
	}
	rec2, _ := m.current(t)
	if rec2.SHA256 != rec1.SHA256 {
		t.Fatal("a batch of only stale episodes changed the weights")
	}
	if rec2.EpisodesTrained != 2 || rec2.EpisodesConsumed != 4 {
		t.Fatalf("version record %+v: want 2 trained and 4 consumed (trained + stale), the staleness gate's base", rec2)
	}

	// A mixed batch: a fresh group trains; a stale episode and a repeat of an already trained group do not.
	v2 := m.model(t)
	fresh := group(v2, "g3", rec2.Version)
	stale := episode(v0, "g4-0", "g4", rec2.Version-1, []int{1}, 1)
	repeat := episode(v0, "g1-9", "g1", rec2.Version, []int{1}, 1)
	m.publishBatch(t, "tb-3", proto.TrainBatch{ID: "tb-3", Episodes: append(fresh, stale, repeat)})
	eventually(t, 10*time.Second, "the mixed batch", func() bool { return r2.tr.Stats().Batches == 3 })
	s = r2.tr.Stats()
	if s.EpisodesTrained != 4 || s.StaleDropped != 3 || s.DupEpisodes != 1 || s.MaxStaleness != 0 {
		t.Fatalf("stats after the mixed batch = %+v, want 4 trained, 3 stale, 1 duplicate episode", s)
	}
	if rec3, _ := m.current(t); rec3.EpisodesConsumed != 7 {
		t.Fatalf("version record consumed %d, want 7 (4 trained + 3 stale; the repeat was counted when first trained)", rec3.EpisodesConsumed)
	}
	// The staleness histogram survives the restart (it is in the checkpoint); busy time is this process's.
	if !slices.Equal(s.Staleness, []int64{4}) || len(s.TurnStaleness) != 1 || s.TurnStaleness[0] < 2 {
		t.Fatalf("staleness histograms %v (episodes) and %v (turns), want every trained episode and turn at 0", s.Staleness, s.TurnStaleness)
	}
	if !(s.BusySeconds > 0) || s.UpdateSeconds > s.BusySeconds || !(s.BusyFraction > 0) || s.BusyFraction > 1 {
		t.Fatalf("busy %vs, update %vs, busy fraction %v", s.BusySeconds, s.UpdateSeconds, s.BusyFraction)
	}
	if rec, _ := m.current(t); rec.Version != 3 || rec.EpisodesTrained != 4 || rec.SHA256 == rec2.SHA256 {
		t.Fatalf("record after the mixed batch = %+v", rec)
	}
}

// A trainer that crashed after its checkpoint and before its step event was stored emits that event again
// at start-up, whole (episodes, loss, time of the step): the checkpoint carries it. It cannot wait for the
// batch to be redelivered, since a later batch may come first. That batch then trains as the next version,
// and the redelivered one is acknowledged without an update. The checkpoint is moved to a second server,
// whose events stream has never seen the step.
func TestStepEventComesBackWholeAfterACrash(t *testing.T) {
	m := newMesh(t)
	cfg := testConfig(0)
	r := m.startTrainer(t, cfg)
	tb1 := proto.TrainBatch{ID: "tb-1", Episodes: group(m.model(t), "g1", 0), TrainerVersion: 0}
	m.publishBatch(t, "tb-1", tb1)
	eventually(t, 10*time.Second, "version 1", func() bool { return m.version(t) == 1 })
	eventually(t, 10*time.Second, "the step event", func() bool { return m.msgs(t, proto.StreamEvents) == 1 })
	step, _ := m.lastStep(t)
	r.stop()
	cp := m.checkpointBytes(t)

	m2 := newMesh(t)
	obj2, err := m2.js.ObjectStore(testCtx(t), proto.BucketCheckpoints)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := obj2.PutBytes(testCtx(t), proto.KeyCheckpoint, cp); err != nil {
		t.Fatal(err)
	}
	r2 := m2.startTrainer(t, cfg)
	if s := r2.tr.Stats(); !s.Resumed || s.Version != 1 {
		t.Fatalf("stats %+v, want resumed at version 1", s)
	}
	if n := m2.msgs(t, proto.StreamEvents); n != 1 {
		t.Fatalf("events stream holds %d step events after the restart, want version 1's", n)
	}
	if again, msgID := m2.lastStep(t); again.Version != 1 || again.BatchID != "tb-1" || again.Episodes != 2 || again.Loss != step.Loss ||
		again.At != step.At || msgID != proto.TrainStepMsgID(1) {
		t.Fatalf("step event emitted again = %+v (msg id %q), want the original %+v", again, msgID, step)
	}

	// The next batch arrives before the redelivery of the first.
	tb2 := proto.TrainBatch{ID: "tb-2", Episodes: group(m2.model(t), "g2", 1), TrainerVersion: 1}
	m2.publishBatch(t, "tb-2", tb2)
	eventually(t, 10*time.Second, "version 2", func() bool { return m2.version(t) == 2 })
	m2.publishBatch(t, "tb-1-redelivered", tb1)
	eventually(t, 10*time.Second, "the duplicate", func() bool { return r2.tr.Stats().Duplicates == 1 })
	if s := r2.tr.Stats(); s.Version != 2 || s.Batches != 2 || s.EpisodesTrained != 4 || s.DupEpisodes != 0 {
		t.Fatalf("stats %+v, want version 2 of two batches, 4 episodes, the redelivery not applied", s)
	}
	if v := m2.version(t); v != 2 {
		t.Fatalf("version %d after a late redelivery, want 2", v)
	}
	if n := m2.msgs(t, proto.StreamEvents); n != 2 {
		t.Fatalf("events stream holds %d step events, want versions 1 and 2", n)
	}
	if last, _ := m2.lastStep(t); last.Version != 2 || last.BatchID != "tb-2" {
		t.Fatalf("last step event %+v, want version 2 of tb-2", last)
	}

	// Restarted with the events stream whole, it stores nothing again.
	r2.stop()
	r3 := m2.startTrainer(t, cfg)
	if s := r3.tr.Stats(); !s.Resumed || s.Version != 2 {
		t.Fatalf("stats %+v, want resumed at version 2", s)
	}
	if n := m2.msgs(t, proto.StreamEvents); n != 2 {
		t.Fatalf("events stream holds %d step events after a clean restart, want 2", n)
	}
}

// A checkpoint written before the trainer kept group keys lists the applied groups by id; a trainer resumes
// from it and still refuses a repeat of those groups. It logs them in the trained-groups log, and its
// checkpoint is then the current form, the count of groups only.
func TestResumesFromCheckpointWithGroupIDs(t *testing.T) {
	m := newMesh(t)
	cfg := testConfig(1)
	r := m.startTrainer(t, cfg)
	m.publishBatch(t, "tb-1", proto.TrainBatch{ID: "tb-1", Episodes: group(m.model(t), "g1", 0)})
	eventually(t, 10*time.Second, "version 1", func() bool { return m.version(t) == 1 })
	r.stop()
	ctx := testCtx(t)
	obj, err := m.js.ObjectStore(ctx, proto.BucketCheckpoints)
	if err != nil {
		t.Fatal(err)
	}
	stored := func() map[string]any { // the stored checkpoint's fields, as msgpack decodes them
		t.Helper()
		b, err := obj.GetBytes(ctx, proto.KeyCheckpoint)
		if err != nil {
			t.Fatal(err)
		}
		var cp map[string]any
		if err := codec.Unmarshal(b, &cp); err != nil {
			t.Fatal(err)
		}
		return cp
	}
	// The checkpoint and log as a trainer of that time left them: ids in the checkpoint, no log.
	cp := stored()
	delete(cp, "groups_remembered")
	cp["groups"] = []string{"g1"}
	logged, err := m.js.Stream(ctx, proto.StreamTrainedGroups)
	if err != nil {
		t.Fatal(err)
	}
	if err := logged.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	b, err := codec.Marshal(cp, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := obj.PutBytes(ctx, proto.KeyCheckpoint, b); err != nil {
		t.Fatal(err)
	}

	r2 := m.startTrainer(t, cfg)
	if s := r2.tr.Stats(); !s.Resumed || s.Version != 1 {
		t.Fatalf("stats %+v, want resumed at version 1", s)
	}
	v1 := m.model(t)
	m.publishBatch(t, "tb-2", proto.TrainBatch{ID: "tb-2", Episodes: append(group(v1, "g2", 1), episode(v1, "g1-9", "g1", 1, []int{1}, 1))})
	eventually(t, 10*time.Second, "the second batch", func() bool { return r2.tr.Stats().Batches == 2 })
	if s := r2.tr.Stats(); s.EpisodesTrained != 4 || s.DupEpisodes != 1 {
		t.Fatalf("stats %+v, want g2's 2 episodes trained and g1's repeat refused", s)
	}
	cp = stored()
	if cp["group_keys"] != nil || cp["groups"] != nil || fmt.Sprint(cp["groups_remembered"]) != "2" {
		t.Fatalf("checkpoint after the batch: group keys %v, ids %v, groups remembered %v; want no keys or ids and 2 (g1, g2)", cp["group_keys"], cp["groups"], cp["groups_remembered"])
	}
	if recs := m.trainedGroups(t); len(recs) != 2 || recs[0].Version != 1 || !slices.Equal(recs[0].Keys, keyOf("g1")) || recs[1].Version != 2 || !slices.Equal(recs[1].Keys, keyOf("g2")) {
		t.Fatalf("trained-groups log %+v, want g1 at version 1 (from the checkpoint) and g2 at version 2", recs)
	}
	r2.stop()
	r3 := m.startTrainer(t, cfg)
	v2 := m.model(t)
	m.publishBatch(t, "tb-3", proto.TrainBatch{ID: "tb-3", Episodes: append(group(v2, "g1", 2), group(v2, "g2", 2)...)})
	eventually(t, 10*time.Second, "the third batch", func() bool { return r3.tr.Stats().Batches == 3 })
	if s := r3.tr.Stats(); s.EpisodesTrained != 4 || s.DupEpisodes != 4 {
		t.Fatalf("stats %+v, want both groups refused as repeats after the restart", s)
	}
}

// keyOf is the trained-groups log's key of a group id: FNV-1a 64, little-endian.
func keyOf(ids ...string) []byte {
	var b []byte
	for _, id := range ids {
		h := fnv.New64a()
		h.Write([]byte(id))
		b = binary.LittleEndian.AppendUint64(b, h.Sum64())
	}
	return b
}

// trainedGroups reads the trained-groups log; a message that is not a record reads as version -1.
func (m *mesh) trainedGroups(t *testing.T) []proto.TrainedGroups {
	t.Helper()
	ctx := testCtx(t)
	n := m.msgs(t, proto.StreamTrainedGroups)
	s, err := m.js.Stream(ctx, proto.StreamTrainedGroups)
	if err != nil {
		t.Fatal(err)
	}
	var out []proto.TrainedGroups
	for seq := uint64(1); uint64(len(out)) < n; seq++ {
		raw, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		var rec proto.TrainedGroups
		if err := codec.Unmarshal(raw.Data, &rec); err != nil {
			rec = proto.TrainedGroups{Version: -1}
		}
		out = append(out, rec)
	}
	return out
}

// The checkpoint carries the number of groups remembered, not their keys: each version's new groups are a
// record in the trained-groups log, stored before its checkpoint, from which a restarted trainer knows them
// again. A record of a version past the checkpoint (an attempt that crashed before its checkpoint) does not
// count, and the version's record stored later replaces it, with no keys if that version trains none; a
// message that is not a record is skipped and counted.
func TestTrainedGroupsLogAcrossRestarts(t *testing.T) {
	m := newMesh(t)
	cfg := testConfig(1)
	r := m.startTrainer(t, cfg)
	m.publishBatch(t, "tb-1", proto.TrainBatch{ID: "tb-1", Episodes: group(m.model(t), "g1", 0)})
	eventually(t, 10*time.Second, "version 1", func() bool { return m.version(t) == 1 })
	r.stop()
	var cp map[string]any
	if err := codec.Unmarshal(m.checkpointBytes(t), &cp); err != nil {
		t.Fatal(err)
	}
	if cp["group_keys"] != nil || fmt.Sprint(cp["groups_remembered"]) != "1" {
		t.Fatalf("checkpoint group keys %v, groups remembered %v; want no keys and 1", cp["group_keys"], cp["groups_remembered"])
	}
	if recs := m.trainedGroups(t); len(recs) != 1 || recs[0].Version != 1 || !slices.Equal(recs[0].Keys, keyOf("g1")) {
		t.Fatalf("trained-groups log %+v, want g1 at version 1", recs)
	}
	// A crashed attempt at version 2 that named g9, and a message that is not a record.
	crashed, err := codec.Marshal(proto.TrainedGroups{Schema: proto.SchemaVersion, Version: 2, Keys: keyOf("g9")}, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, data := range [][]byte{crashed, []byte("not msgpack")} {
		if _, err := m.js.Publish(testCtx(t), proto.SubjectTrainedGroups, data); err != nil {
			t.Fatal(err)
		}
	}

	r2 := m.startTrainer(t, cfg)
	if s := r2.tr.Stats(); s.BadGroupRecords != 1 {
		t.Fatalf("stats %+v, want the one message that is not a record counted", s)
	}
	// Version 2 trains no group (g1 again): its record, with no keys, still replaces the crashed attempt's.
	v1 := m.model(t)
	m.publishBatch(t, "tb-2", proto.TrainBatch{ID: "tb-2", Episodes: group(v1, "g1", 1)})
	eventually(t, 10*time.Second, "the second batch", func() bool { return r2.tr.Stats().Batches == 2 })
	m.publishBatch(t, "tb-3", proto.TrainBatch{ID: "tb-3", Episodes: group(v1, "g2", 1)})
	eventually(t, 10*time.Second, "the third batch", func() bool { return r2.tr.Stats().Batches == 3 })
	if s := r2.tr.Stats(); s.EpisodesTrained != 4 || s.DupEpisodes != 2 {
		t.Fatalf("stats %+v, want g1's repeat refused and g2 trained", s)
	}
	m.publishBatch(t, "tb-4", proto.TrainBatch{ID: "tb-4", Episodes: group(m.model(t), "g1", 3)})
	eventually(t, 10*time.Second, "the fourth batch", func() bool { return r2.tr.Stats().Batches == 4 })
	r2.stop()
	recs := m.trainedGroups(t)
	var versions []int64
	for _, rec := range recs {
		versions = append(versions, rec.Version)
	}
	if !slices.Equal(versions, []int64{1, 2, -1, 2, 3}) || len(recs[3].Keys) != 0 {
		t.Fatalf("records %+v, want versions 1, 2, not a record, 2 with no keys, 3 and none for version 4, which trained nothing after the crashed attempt's", recs)
	}

	r3 := m.startTrainer(t, cfg)
	v4 := m.model(t)
	m.publishBatch(t, "tb-5", proto.TrainBatch{ID: "tb-5", Episodes: slices.Concat(group(v4, "g9", 4), group(v4, "g1", 4), group(v4, "g2", 4))})
	eventually(t, 10*time.Second, "the fifth batch", func() bool { return r3.tr.Stats().Batches == 5 })
	if s := r3.tr.Stats(); s.EpisodesTrained != 6 || s.DupEpisodes != 4 {
		t.Fatalf("stats %+v, want g9 trained (its record was of a crashed attempt, replaced) and g1 and g2 refused", s)
	}
}

// A checkpoint ahead of the version record (a crash between the two) is repaired on restart.
func TestRestartRepublishesVersionMissingFromKV(t *testing.T) {
	m := newMesh(t)
	cfg := testConfig(1)
	r := m.startTrainer(t, cfg)
	kv, err := m.js.KeyValue(testCtx(t), proto.BucketPolicy)
	if err != nil {
		t.Fatal(err)
	}
	e0, err := kv.Get(testCtx(t), proto.KeyPolicyCurrent)
	if err != nil {
		t.Fatal(err)
	}
	m.publishBatch(t, "tb-1", proto.TrainBatch{ID: "tb-1", Episodes: group(m.model(t), "g1", 0)})
	eventually(t, 10*time.Second, "version 1", func() bool { return m.version(t) == 1 })
	r.stop()
	if _, err := kv.Put(testCtx(t), proto.KeyPolicyCurrent, e0.Value()); err != nil {
		t.Fatal(err)
	}
	m.startTrainer(t, cfg)
	rec, _ := m.current(t)
	if rec.Version != 1 || rec.BatchID != "tb-1" || rec.EpisodesTrained != 2 {
		t.Fatalf("record after restart = %+v, want version 1 of tb-1 republished", rec)
	}
}

func TestRefusedBatchesAreDeadLettered(t *testing.T) {
	m := newMesh(t)
	r := m.startTrainer(t, testConfig(1))
	pm := m.model(t)
	rec0, _ := m.current(t)

	nan := group(pm, "g-nan", 0)
	nan[1].Advantages[1] = math.NaN()
	short := group(pm, "g-short", 0)
	short[0].Advantages = short[0].Advantages[:1]
	tests := []struct {
		name           string
		given          func() []byte
		expectedReason string
	}{
		{"NaN advantage", func() []byte {
			return mustMarshal(t, proto.TrainBatch{Schema: proto.SchemaVersion, ID: "tb-nan", Episodes: nan})
		}, proto.ErrBadNumber.Error()},
		{"fewer advantages than turns", func() []byte {
			return mustMarshal(t, proto.TrainBatch{Schema: proto.SchemaVersion, ID: "tb-short", Episodes: short})
		}, proto.ErrMalformed.Error()},
		{"not msgpack", func() []byte { return []byte("\x00\x01garbage") }, proto.ErrMalformed.Error()},
		{"old schema", func() []byte { return mustMarshal(t, proto.TrainBatch{ID: "tb-old"}) }, proto.ErrSchema.Error()},
	}
	for i, tc := range tests {
		data := tc.given()
		m.publish(t, "bad-"+tc.name, data)
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
		if dl.Subject != proto.SubjectDeadLetterPrefix+"trainer" || string(dl.Data) != string(data) ||
			dl.Header.Get(proto.HeaderDeadLetterSubject) != proto.SubjectTrain {
			t.Fatalf("%s: dead letter on %s with headers %v", tc.name, dl.Subject, dl.Header)
		}
		if reason := dl.Header.Get(proto.HeaderDeadLetterReason); !strings.HasPrefix(reason, tc.expectedReason) {
			t.Fatalf("%s: reason %q, want it to start with %q", tc.name, reason, tc.expectedReason)
		}
	}
	s := r.tr.Stats()
	if s.DeadLettered != 4 || s.Version != 0 || s.Batches != 0 || s.EpisodesTrained != 0 {
		t.Fatalf("stats = %+v, want 4 dead-lettered, nothing applied", s)
	}
	// The two batches that decoded will never train: their 2 + 2 episodes' admissions go back to the
	// staleness gate (the other two have no episodes to count).
	counter, err := admission.Bind(testCtx(t), m.js)
	if err != nil {
		t.Fatal(err)
	}
	if a, _, err := counter.Read(testCtx(t)); err != nil || a.Refunded != 4 || s.Refunded != 4 || s.RefundErrors != 0 {
		t.Fatalf("admissions refunded %d (err %v), stats %+v; want 4 and no refund errors", a.Refunded, err, s)
	}
	if rec, _ := m.current(t); rec.Version != 0 || rec.SHA256 != rec0.SHA256 {
		t.Fatalf("a refused batch changed the published policy: %+v", rec)
	}
	// The refused batches left the weights as they were: a good batch of the NaN batch's groups still
	// trains (they were never marked as trained) from the original weights.
	good := group(pm, "g-nan", 0)
	m.publishBatch(t, "tb-good", proto.TrainBatch{ID: "tb-good", Episodes: good})
	eventually(t, 10*time.Second, "the good batch", func() bool { return r.tr.Stats().Batches == 1 })
	if s := r.tr.Stats(); s.EpisodesTrained != 2 || s.DupEpisodes != 0 {
		t.Fatalf("stats after the good batch = %+v", s)
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
		givenEdit  func(c *trainer.Config)
		givenConn  *nats.Conn
		expectedOK bool
	}{
		{"test config", func(*trainer.Config) {}, nc, true},
		{"default config", func(c *trainer.Config) { *c = trainer.DefaultConfig() }, nc, true},
		{"no dual clip", func(c *trainer.Config) { c.Loss.DualClip = 0 }, nc, true},
		{"clip 0", func(c *trainer.Config) { c.Loss.Clip = 0 }, nc, false},
		{"clip 1", func(c *trainer.Config) { c.Loss.Clip = 1 }, nc, false},
		{"dual clip 1", func(c *trainer.Config) { c.Loss.DualClip = 1 }, nc, false},
		{"no epochs", func(c *trainer.Config) { c.Epochs = 0 }, nc, false},
		{"negative eta", func(c *trainer.Config) { c.Eta = -1 }, nc, false},
		{"tiny model", func(c *trainer.Config) { c.Model.Bits = 4 }, nc, false},
		{"no connection", func(*trainer.Config) {}, nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(1)
			tc.givenEdit(&cfg)
			_, err := trainer.New(cfg, trainer.Deps{Conn: tc.givenConn, Log: zerolog.Nop()})
			if (err == nil) != tc.expectedOK {
				t.Fatalf("New error = %v, want ok %v", err, tc.expectedOK)
			}
		})
	}
}

// With TurnStaleness the bound applies to each turn: an episode admitted too long ago trains its turns
// produced within eta, one with none left is dropped stale, and turns of the cross-policy stale copy are
// not judged. The histograms count what trained: episodes from their first trained turn, turns each.
func TestTurnStalenessTrainsTheFreshTurns(t *testing.T) {
	m := newMesh(t)
	cfg := testConfig(1)
	cfg.TurnStaleness = true
	r := m.startTrainer(t, cfg)
	for v := range int64(2) {
		id := fmt.Sprintf("g%d", v)
		m.publishBatch(t, id, proto.TrainBatch{ID: id, Episodes: group(m.model(t), id, v)})
		eventually(t, 10*time.Second, "version "+fmt.Sprint(v+1), func() bool { return m.version(t) == v+1 })
	}
	eventually(t, 10*time.Second, "two batches counted", func() bool { return r.tr.Stats().Batches == 2 })
	pm := m.model(t)
	late := episode(pm, "late", "g", 0, []int{0, 0, 1, 0}, 1) // turns at versions 0, 1, 2, 2: the first is 2 old
	for i, v := range []int64{0, 1, 2, 2} {
		late.Episode.Turns[i].Version = v
	}
	gone := episode(pm, "gone", "g", 0, []int{2, 2}, -1) // both turns at version 0
	copied := episode(pm, "copied", "g", 0, []int{3, 0}, 0.5)
	copied.Episode.Turns[0].Policy = proto.PolicyStale // the stale copy's turn, at version 0, and one at 2
	copied.Episode.Turns[1].Version = 2
	m.publishBatch(t, "g-late", proto.TrainBatch{ID: "g-late", Episodes: []proto.TrainEpisode{late, gone, copied}})
	eventually(t, 10*time.Second, "version 3", func() bool { return m.version(t) == 3 })
	eventually(t, 10*time.Second, "three batches counted", func() bool { return r.tr.Stats().Batches == 3 })
	s := r.tr.Stats()
	if s.EpisodesTrained != 6 || s.StaleDropped != 1 || s.StaleTurns != 1 || s.MaxStaleness != 1 {
		t.Fatalf("stats %+v: want 6 trained (late, copied), 1 stale (gone), 1 stale turn (late's first), max staleness 1", s)
	}
	// Episodes: the first two batches at 0; late from its turn at version 1 (1 old), copied from its turn at 2.
	if !slices.Equal(s.Staleness, []int64{5, 1}) {
		t.Fatalf("episode staleness %v, want [5 1]", s.Staleness)
	}
	// Turns: 10 of the first batches at 0; late's at 1, 2, 2 (1, 0, 0); copied's at 0 (2, the copy) and 2 (0).
	if !slices.Equal(s.TurnStaleness, []int64{13, 1, 1}) {
		t.Fatalf("turn staleness %v, want [13 1 1]", s.TurnStaleness)
	}
	if step, _ := m.lastStep(t); step.Version != 3 || step.Episodes != 2 || step.MaxStaleness != 1 {
		t.Fatalf("step event %+v, want version 3 of 2 episodes, max staleness 1", step)
	}

	// Without it the same batch is judged by admission: all three are 2 versions old, none trains.
	m2 := newMesh(t)
	r2 := m2.startTrainer(t, testConfig(1))
	for v := range int64(2) {
		id := fmt.Sprintf("g%d", v)
		m2.publishBatch(t, id, proto.TrainBatch{ID: id, Episodes: group(m2.model(t), id, v)})
		eventually(t, 10*time.Second, "version "+fmt.Sprint(v+1), func() bool { return m2.version(t) == v+1 })
	}
	m2.publishBatch(t, "g-late", proto.TrainBatch{ID: "g-late", Episodes: []proto.TrainEpisode{late, gone, copied}})
	eventually(t, 10*time.Second, "three batches counted", func() bool { return r2.tr.Stats().Batches == 3 })
	if s := r2.tr.Stats(); s.EpisodesTrained != 4 || s.StaleDropped != 3 || s.StaleTurns != 0 {
		t.Fatalf("stats by admission %+v: want 4 trained, 3 stale", s)
	}
}

// Another trainer on the mesh (here the test writes the version record as one would): the trainer finds
// the record is no longer its own before its next checkpoint and stops with ErrFenced, leaving the
// checkpoint and the record as they were.
func TestTrainerIsFencedByAnotherTrainersVersion(t *testing.T) {
	m := newMesh(t)
	tr, err := trainer.New(testConfig(1), trainer.Deps{Conn: m.conn(t), Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { done <- tr.Run(ctx) }()
	eventually(t, 10*time.Second, "the trainer to run", tr.Running)
	pm := m.model(t)
	m.publishBatch(t, "tb-1", proto.TrainBatch{ID: "tb-1", Episodes: group(pm, "g1", 0)})
	eventually(t, 10*time.Second, "version 1", func() bool { return tr.Stats().Version == 1 })

	kv, err := m.js.KeyValue(testCtx(t), proto.BucketPolicy)
	if err != nil {
		t.Fatal(err)
	}
	other, err := codec.Marshal(proto.PolicyVersion{Schema: proto.SchemaVersion, Version: 2, BatchID: "other-trainer", Object: proto.WeightsObject(2)}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(testCtx(t), proto.KeyPolicyCurrent, other); err != nil {
		t.Fatal(err)
	}
	m.publishBatch(t, "tb-2", proto.TrainBatch{ID: "tb-2", Episodes: group(pm, "g2", 1)})
	select {
	case err := <-done:
		if !errors.Is(err, trainer.ErrFenced) {
			t.Fatalf("Run returned %v, want ErrFenced", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the trainer ran on over another trainer's version")
	}
	e, err := kv.Get(testCtx(t), proto.KeyPolicyCurrent)
	if err != nil {
		t.Fatal(err)
	}
	if string(e.Value()) != string(other) {
		t.Fatal("the fenced trainer wrote the version record over the other trainer's")
	}
	var cp map[string]any
	if err := codec.Unmarshal(m.checkpointBytes(t), &cp); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(cp["version"]) != "1" {
		t.Fatalf("checkpoint at version %v after the fence, want 1 (not written over)", cp["version"])
	}
}
