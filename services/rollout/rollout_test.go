package rollout_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/services/env"
	"github.com/jetrl/jetrl/services/env/task/alfworld"
	"github.com/jetrl/jetrl/services/rollout"
	"github.com/jetrl/jetrl/shared/admission"
	"github.com/jetrl/jetrl/shared/codec"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// A replica plays whole groups under the staleness gate: with B=8, G=4 and eta=0 it publishes exactly one
// batch of episodes per trainer version.
func TestRolloutPublishesGroupsUnderTheGate(t *testing.T) {
	m := newMesh(t)
	m.startHost(t)
	m.publishModel(t, newModel(t, 1), 0, "")
	r, err := rollout.New(rollout.Config{Tasks: []string{alfworld.Name}, GroupSize: 4, BatchSize: 8, Eta: 0,
		Concurrency: 8, StaleProb: 0.5, StaleEvery: 25, Seed: 1, CallTimeout: 5 * time.Second},
		rollout.Deps{Conn: m.conn(t), Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, r)

	eventually(t, 20*time.Second, "8 episodes", func() bool { return m.msgs(t, proto.StreamEpisodes) >= 8 })
	// The gate is shut at 8 until the version moves: no ninth episode starts.
	time.Sleep(300 * time.Millisecond)
	if n := m.msgs(t, proto.StreamEpisodes); n != 8 {
		t.Fatalf("%d episodes published at version 0 with B=8, eta=0; want 8", n)
	}
	if a := m.admitted(t); a.Started != 8 {
		t.Fatalf("admission counter started %d, want 8", a.Started)
	}
	if n := m.msgs(t, proto.StreamGroups); n != 2 {
		t.Fatalf("%d group start markers for two admitted groups of 4, want 2", n)
	}
	// The counter keeps this run's last claim, under its instance, and the last marker on the instance's
	// subject is that claim's group: what the replay-buffer checks once a replica has gone silent.
	a := m.admitted(t)
	if len(a.Claims) != 1 {
		t.Fatalf("claims %+v, want the replica's last", a.Claims)
	}
	for instance, c := range a.Claims {
		if !proto.Token(instance) || c.GroupSize != 4 || c.StartVersion != 0 || c.Task != alfworld.Name || c.RolloutID == "" {
			t.Fatalf("claim %s: %+v, want a group of 4 at version 0 naming its replica", instance, c)
		}
		groups, err := m.js.Stream(testCtx(t), proto.StreamGroups)
		if err != nil {
			t.Fatal(err)
		}
		msg, err := groups.GetLastMsgForSubject(testCtx(t), proto.SubjectGroupStartOf(instance))
		if err != nil {
			t.Fatal(err)
		}
		var gs proto.GroupStart
		if err := codec.Unmarshal(msg.Data, &gs); err != nil || gs.GroupID != c.GroupID || gs.StartVersion != 0 || gs.GroupSize != 4 {
			t.Fatalf("last marker of the instance %+v (%v), want the claim's group %s", gs, err, c.GroupID)
		}
	}
	m.publishModel(t, newModel(t, 2), 1, "")
	eventually(t, 20*time.Second, "16 episodes after version 1", func() bool { return m.msgs(t, proto.StreamEpisodes) >= 16 })
	time.Sleep(300 * time.Millisecond)
	if n := m.msgs(t, proto.StreamEpisodes); n != 16 {
		t.Fatalf("%d episodes published by version 1, want 16", n)
	}

	eps := m.episodes(t)
	groups := map[string][]proto.Episode{}
	ids := map[string]bool{}
	stale := 0
	for _, ep := range eps {
		if err := ep.Validate(); err != nil {
			t.Fatalf("episode %s: %v", ep.ID, err)
		}
		if ids[ep.ID] {
			t.Fatalf("episode id %s published twice", ep.ID)
		}
		ids[ep.ID] = true
		if ep.InfraFailure || ep.Task != alfworld.Name || ep.Split != proto.SplitTrain || ep.GroupSize != 4 || len(ep.Turns) == 0 {
			t.Fatalf("episode %s = %+v", ep.ID, ep)
		}
		groups[ep.GroupID] = append(groups[ep.GroupID], ep)
		for _, turn := range ep.Turns {
			switch turn.Policy {
			case proto.PolicyCurrent:
				if turn.Version < ep.StartVersion || turn.Version > 1 {
					t.Fatalf("episode %s admitted at %d has a current-policy turn by version %d", ep.ID, ep.StartVersion, turn.Version)
				}
			case proto.PolicyStale:
				stale++
				if turn.Version != 0 {
					t.Fatalf("stale turn by version %d; the stale copy is version 0 until version 25", turn.Version)
				}
			default:
				t.Fatalf("turn by policy %q", turn.Policy)
			}
		}
	}
	if len(groups) != 4 {
		t.Fatalf("%d groups, want 4 groups of 4", len(groups))
	}
	perVersion := map[int64]int{}
	for id, g := range groups {
		if len(g) != 4 {
			t.Fatalf("group %s has %d episodes", id, len(g))
		}
		for _, ep := range g[1:] {
			if ep.Seed != g[0].Seed || ep.StartVersion != g[0].StartVersion {
				t.Fatalf("group %s mixes instances or versions", id)
			}
		}
		perVersion[g[0].StartVersion] += len(g)
	}
	if perVersion[0] != 8 || perVersion[1] != 8 {
		t.Fatalf("episodes per start version = %v, want 8 at 0 and 8 at 1", perVersion)
	}
	if stale == 0 {
		t.Log("no stale turn was sampled (possible if version 1 episodes were short)")
	}

	// The status endpoint reports what was published.
	msg, err := m.nc.Request(proto.SubjectStatus("rollout"), nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var status struct {
		Status rollout.Status `json:"status"`
	}
	if err := json.Unmarshal(msg.Data, &status); err != nil {
		t.Fatal(err)
	}
	if status.Status.Published != 16 || status.Status.Version != 1 || status.Status.InfraFailures != 0 {
		t.Fatalf("status = %s", msg.Data)
	}
	// Every start and step went in batches to the host, which serves them: 16 starts and at least one
	// step per episode, in no more messages than calls.
	st := status.Status
	if st.EnvBatchedCalls < 16+st.Turns || st.EnvBatches < 1 || st.EnvBatches > st.EnvBatchedCalls || st.EnvMalformedReplies != 0 {
		t.Fatalf("env batches in status = %s, want the 16 starts and %d steps batched", msg.Data, st.Turns)
	}
	stop()
	if r.Running() {
		t.Fatal("still running after Run returned")
	}
	// A replica that stops cleanly takes its last claim away with it.
	if a := m.admitted(t); len(a.Claims) != 0 {
		t.Fatalf("claims %+v after the replica stopped, want none", a.Claims)
	}
}

// A replica's groups play the instances its seed and id choose, in admission order: the same in every run
// with the same id on a fresh mesh (bench async-vs-sync's --seed relies on it), others under another id,
// and others again once admissions have been started before the run (the salt is their number).
func TestGroupInstancesFollowTheReplicasSeedAndID(t *testing.T) {
	// plays runs a replica to 8 episodes (two groups of 4) under one policy version, on a mesh whose
	// admission counter has seen startedBefore admissions (all given back), and returns the instances it
	// played and, by instance and member, the candidates each turn chose (episodes the env failed left out).
	plays := func(id string, startedBefore int64) ([]uint64, map[string][]int) {
		m := newMesh(t)
		m.startHost(t)
		m.publishModel(t, newModel(t, 1), 0, "")
		if startedBefore > 0 {
			c, err := admission.Bind(testCtx(t), m.js)
			if err != nil {
				t.Fatal(err)
			}
			if ok, err := c.TryClaim(testCtx(t), startedBefore, startedBefore); !ok || err != nil {
				t.Fatalf("claim: %v %v", ok, err)
			}
			if err := c.Refund(testCtx(t), startedBefore); err != nil {
				t.Fatal(err)
			}
		}
		r, err := rollout.New(rollout.Config{ID: id, Tasks: []string{alfworld.Name}, GroupSize: 4, BatchSize: 8, Eta: 0,
			Concurrency: 8, Seed: 1, CallTimeout: 5 * time.Second}, rollout.Deps{Conn: m.conn(t), Log: zerolog.Nop()})
		if err != nil {
			t.Fatal(err)
		}
		stop := run(t, r)
		eventually(t, 20*time.Second, "8 episodes", func() bool { return m.msgs(t, proto.StreamEpisodes) >= 8 })
		stop()
		var seeds []uint64
		chose := map[string][]int{}
		for _, ep := range m.episodes(t) {
			if !slices.Contains(seeds, ep.Seed) {
				seeds = append(seeds, ep.Seed)
			}
			if ep.InfraFailure {
				continue
			}
			key := fmt.Sprintf("%d/%s", ep.Seed, strings.TrimPrefix(ep.ID, ep.GroupID))
			for _, turn := range ep.Turns {
				chose[key] = append(chose[key], turn.Chosen)
			}
		}
		slices.Sort(seeds)
		return seeds, chose
	}
	a, aPlays := plays("replica-a", 0)
	again, againPlays := plays("replica-a", 0)
	b, _ := plays("replica-b", 0)
	restarted, _ := plays("replica-a", 8)
	restartedAgain, _ := plays("replica-a", 8)
	later, _ := plays("replica-a", 16)
	if len(a) != 2 || !slices.Equal(a, again) {
		t.Fatalf("instances of two runs of replica-a: %v and %v; want the same two", a, again)
	}
	if len(b) != 2 || slices.Equal(a, b) {
		t.Fatalf("instances of replica-a %v and replica-b %v; want two each, not the same", a, b)
	}
	// A run after admissions were started (replica-a restarted on a mesh that has run) plays others.
	if len(restarted) != 2 || slices.ContainsFunc(restarted, func(s uint64) bool { return slices.Contains(a, s) }) {
		t.Fatalf("instances of replica-a after 8 admissions %v, fresh %v; want two others", restarted, a)
	}
	if !slices.Equal(restarted, restartedAgain) || len(later) != 2 || slices.Equal(later, restarted) || slices.Equal(later, a) {
		t.Fatalf("instances of replica-a after 8 admissions %v and %v, after 16 %v; want the first two alike, the third other", restarted, restartedAgain, later)
	}
	// Each turn samples from its own draw (instance, member, turn), not from a sampler shared by the
	// episodes in play: two runs of one seed under one policy choose alike, turn for turn.
	compared := 0
	for key, choices := range aPlays {
		if other, ok := againPlays[key]; ok {
			compared++
			if !slices.Equal(choices, other) {
				t.Fatalf("episode %s of two runs of replica-a chose %v and %v", key, choices, other)
			}
		}
	}
	if compared < 6 {
		t.Fatalf("only %d of 8 episodes played to the end in both runs (the env failed the rest)", compared)
	}
	// The members of a group draw apart: they do not all play the same game.
	for _, seed := range a {
		var plays [][]int
		for k := range 4 {
			if p, ok := aPlays[fmt.Sprintf("%d/-%d", seed, k)]; ok {
				plays = append(plays, p)
			}
		}
		if len(plays) > 1 && !slices.ContainsFunc(plays[1:], func(p []int) bool { return !slices.Equal(p, plays[0]) }) {
			t.Fatalf("the members of instance %d chose alike: %v", seed, plays)
		}
	}
}

func TestNewValidates(t *testing.T) {
	m := newMesh(t)
	valid := func() rollout.Config { return rollout.Config{Tasks: []string{alfworld.Name}} }
	tests := []struct {
		name       string
		givenEdit  func(c *rollout.Config)
		givenConn  *nats.Conn
		expectedOK bool
	}{
		{"defaults", func(*rollout.Config) {}, m.nc, true},
		{"no tasks", func(c *rollout.Config) { c.Tasks = nil }, m.nc, false},
		{"batch not a multiple of the group", func(c *rollout.Config) { c.GroupSize, c.BatchSize = 8, 12 }, m.nc, false},
		{"batch smaller than the group", func(c *rollout.Config) { c.GroupSize, c.BatchSize = 8, 4 }, m.nc, false},
		{"negative eta", func(c *rollout.Config) { c.Eta = -1 }, m.nc, false},
		{"stale probability 1", func(c *rollout.Config) { c.StaleProb = 1 }, m.nc, false},
		{"negative stale probability", func(c *rollout.Config) { c.StaleProb = -0.1 }, m.nc, false},
		{"paper's stale probability", func(c *rollout.Config) { c.StaleProb = 0.25 }, m.nc, true},
		{"checkpoint member", func(c *rollout.Config) { c.StaleProb, c.CheckpointObject, c.CheckpointProb = 0.25, "pool/x", 0.1 }, m.nc, true},
		{"checkpoint without probability", func(c *rollout.Config) { c.CheckpointObject = "pool/x" }, m.nc, false},
		{"checkpoint and stale probabilities reach 1", func(c *rollout.Config) { c.StaleProb, c.CheckpointObject, c.CheckpointProb = 0.5, "pool/x", 0.5 }, m.nc, false},
		{"checkpoint probability without checkpoint", func(c *rollout.Config) { c.CheckpointProb = 0.1 }, m.nc, false},
		{"negative concurrency", func(c *rollout.Config) { c.Concurrency = -1 }, m.nc, false},
		{"heartbeat under 10ms", func(c *rollout.Config) { c.HeartbeatEvery = time.Millisecond }, m.nc, false},
		{"negative heartbeat", func(c *rollout.Config) { c.HeartbeatEvery = -time.Second }, m.nc, false},
		{"no connection", func(*rollout.Config) {}, nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := valid()
			tc.givenEdit(&c)
			_, err := rollout.New(c, rollout.Deps{Conn: tc.givenConn, Log: zerolog.Nop()})
			if (err == nil) != tc.expectedOK {
				t.Fatalf("New error = %v, want ok %v", err, tc.expectedOK)
			}
		})
	}
}

// A replica configured with a saved checkpoint plays some turns with it, recorded as such; a checkpoint
// that is not in the Object Store stops the replica with an error naming it.
func TestRolloutPlaysWithACheckpointMember(t *testing.T) {
	m := newMesh(t)
	m.startHost(t)
	m.publishModel(t, newModel(t, 1), 0, "")
	cfg := rollout.Config{Tasks: []string{alfworld.Name}, GroupSize: 4, BatchSize: 8, Eta: 0, Concurrency: 8,
		CheckpointObject: "pool/missing", CheckpointProb: 0.5, Seed: 1, CallTimeout: 5 * time.Second}
	r, err := rollout.New(cfg, rollout.Deps{Conn: m.conn(t), Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Run(testCtx(t)); err == nil || !strings.Contains(err.Error(), "pool/missing") {
		t.Fatalf("Run with a missing checkpoint: %v", err)
	}

	w, err := newModel(t, 42).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	obj, err := m.js.ObjectStore(testCtx(t), proto.BucketWeights)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := obj.Put(testCtx(t), jetstream.ObjectMeta{Name: "pool/other-run", Metadata: map[string]string{rollout.CheckpointVersionKey: "77"}}, bytes.NewReader(w)); err != nil {
		t.Fatal(err)
	}
	cfg.CheckpointObject = "pool/other-run"
	r, err = rollout.New(cfg, rollout.Deps{Conn: m.conn(t), Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, r)
	eventually(t, 20*time.Second, "8 episodes", func() bool { return m.msgs(t, proto.StreamEpisodes) >= 8 })
	stop()
	byPolicy := map[string]int{}
	for _, ep := range m.episodes(t) {
		for _, turn := range ep.Turns {
			byPolicy[turn.Policy]++
			if turn.Policy == proto.PolicyCheckpoint && turn.Version != 77 {
				t.Fatalf("checkpoint turn with version %d, want 77", turn.Version)
			}
		}
	}
	if byPolicy[proto.PolicyCheckpoint] == 0 || byPolicy[proto.PolicyCurrent] == 0 {
		t.Fatalf("turns by policy %v, want both current and checkpoint turns", byPolicy)
	}
}

// Episodes no batch can take any more stop, whichever says so first: the trainer's version passing their
// bound, or the replay-buffer's closed mark (it composed the last batch that could take them).
func TestRolloutStopsEpisodesNoBatchCanTake(t *testing.T) {
	t.Run("version", func(t *testing.T) { testRolloutStops(t, false) })
	t.Run("closed-mark", func(t *testing.T) { testRolloutStops(t, true) })
}

func testRolloutStops(t *testing.T, byMark bool) {
	m := newMesh(t)
	m.startHostWith(t, env.Config{StepLatency: func() time.Duration { return 50 * time.Millisecond }})
	m.publishModel(t, newModel(t, 1), 0, "")
	r, err := rollout.New(rollout.Config{Tasks: []string{alfworld.Name}, GroupSize: 4, BatchSize: 8, Eta: 0, StopStale: true,
		Concurrency: 8, Seed: 1, CallTimeout: 5 * time.Second},
		rollout.Deps{Conn: m.conn(t), Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, r)
	eventually(t, 10*time.Second, "two groups admitted at version 0", func() bool { return m.msgs(t, proto.StreamGroups) >= 2 })
	if byMark {
		// The buffer composed the batch for version 0 without them.
		if err := m.counter(t).Close(testCtx(t), 1); err != nil {
			t.Fatal(err)
		}
	} else {
		// Version 1 is past the bound of the groups admitted at 0 (eta 0): no batch can take them any more.
		m.publishModel(t, newModel(t, 2), 1, "")
	}
	eventually(t, 20*time.Second, "the version-0 episodes published", func() bool {
		n := 0
		for _, ep := range m.episodes(t) {
			if ep.StartVersion == 0 {
				n++
			}
		}
		return n == 8
	})
	stop()
	var stopped, stoppedTurns int64
	for _, ep := range m.episodes(t) {
		if err := ep.Validate(); err != nil {
			t.Fatalf("episode %s: %v", ep.ID, err)
		}
		if ep.Status != proto.StatusStale {
			continue
		}
		if ep.StartVersion != 0 || ep.Reward != 0 || ep.InfraFailure {
			t.Fatalf("episode %s stopped as stale: start version %d, reward %v, infra %v", ep.ID, ep.StartVersion, ep.Reward, ep.InfraFailure)
		}
		for _, turn := range ep.Turns {
			if turn.Version != 0 {
				t.Fatalf("stopped episode %s played a turn by version %d, past its bound", ep.ID, turn.Version)
			}
		}
		stopped++
		stoppedTurns += int64(len(ep.Turns))
	}
	// 50 ms a step: a random policy does not finish an alfworld episode in the time the new version takes
	// to load, so most of the eight are stopped.
	if stopped < 4 {
		t.Fatalf("%d of the 8 version-0 episodes stopped, want most", stopped)
	}
	if st := r.Status(); st.StoppedStale != stopped || st.StoppedStaleTurns != stoppedTurns {
		t.Fatalf("status counts %d stopped (%d turns), the stream holds %d (%d turns)", st.StoppedStale, st.StoppedStaleTurns, stopped, stoppedTurns)
	}
}
