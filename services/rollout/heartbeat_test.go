package rollout_test

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/services/env"
	"github.com/jetrl/jetrl/services/env/task/alfworld"
	"github.com/jetrl/jetrl/services/rollout"
	"github.com/jetrl/jetrl/shared/codec"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

// A replica's heartbeat lists the groups it has admitted and not finished publishing: its two groups while
// they play (each step takes 50 ms), and none once their episodes are all published.
func TestHeartbeatListsTheGroupsInPlay(t *testing.T) {
	m := newMesh(t)
	m.startHostWith(t, env.Config{StepLatency: func() time.Duration { return 50 * time.Millisecond }})
	m.publishModel(t, newModel(t, 1), 0, "")

	var mu sync.Mutex
	var beats []proto.RolloutHeartbeat
	sub, err := m.conn(t).Subscribe(proto.SubjectRolloutHeartbeat, func(msg *nats.Msg) {
		var hb proto.RolloutHeartbeat
		if err := codec.Unmarshal(msg.Data, &hb); err != nil {
			t.Errorf("heartbeat: %v", err)
			return
		}
		if err := hb.Validate(); err != nil {
			t.Errorf("heartbeat: %v", err)
		}
		mu.Lock()
		beats = append(beats, hb)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	snapshot := func() []proto.RolloutHeartbeat {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(beats)
	}

	r, err := rollout.New(rollout.Config{ID: "r-beat", Tasks: []string{alfworld.Name}, GroupSize: 4, BatchSize: 8, Eta: 0,
		Concurrency: 8, Seed: 1, CallTimeout: 5 * time.Second, HeartbeatEvery: 20 * time.Millisecond},
		rollout.Deps{Conn: m.conn(t), Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	run(t, r)

	eventually(t, 30*time.Second, "8 episodes", func() bool { return m.msgs(t, proto.StreamEpisodes) >= 8 })
	groups := map[string]bool{}
	for _, ep := range m.episodes(t) {
		groups[ep.GroupID] = true
	}
	if len(groups) != 2 {
		t.Fatalf("episodes of %d groups, want 2", len(groups))
	}
	// The gate stays shut at version 0, so nothing else opens: the heartbeats go on listing nothing.
	eventually(t, 10*time.Second, "a heartbeat listing no group", func() bool {
		b := snapshot()
		return len(b) > 0 && len(b[len(b)-1].Groups) == 0
	})
	bothListed := false
	got := snapshot()
	claims := m.admitted(t).Claims
	for _, hb := range got {
		if hb.RolloutID != "r-beat" {
			t.Fatalf("heartbeat of %q, want r-beat", hb.RolloutID)
		}
		// Every heartbeat of the run names it, as its claims do.
		if _, ok := claims[hb.Instance]; !ok || hb.Instance != got[0].Instance {
			t.Fatalf("heartbeat of instance %q: want the run's one instance, under which the counter keeps its claim", hb.Instance)
		}
		for _, g := range hb.Groups {
			if !groups[g] {
				t.Fatalf("heartbeat lists %s, not one of the groups played", g)
			}
		}
		bothListed = bothListed || len(hb.Groups) == 2
	}
	if !bothListed {
		t.Fatal("no heartbeat listed both groups while they played")
	}
}
