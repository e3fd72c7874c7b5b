package tests

import (
	"context"
	"testing"
	"time"

	"github.com/jetrl/jetrl/cmd/jetrl/mesh"
	"github.com/jetrl/jetrl/proto"
	normalizer "github.com/jetrl/jetrl/services/advantage-normalizer"
	"github.com/jetrl/jetrl/services/rollout"
	"github.com/jetrl/jetrl/services/trainer"
	"github.com/jetrl/jetrl/shared/bus"
)

// TestEnvHostDies runs two env hosts and cuts one off NATS mid-run: the rollout goes on with the other, its
// breaker for the dead host opens, the episodes lost with it are counted as infrastructure failures, and
// none of them reaches the trainer.
func TestEnvHostDies(t *testing.T) {
	url := embedded(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	m, err := mesh.Start(ctx, mesh.Config{NATSURL: url, Tasks: []string{"alfworld"}, Seed: 5, GroupSize: 8, BatchSize: 32, Eta: 2,
		EnvHosts: 2, Rollout: rollout.Config{CallTimeout: 2 * time.Second}, Trainer: trainer.DefaultConfig(), Normalizer: normalizer.DefaultConfig(), Log: testLog(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	if err := m.StartRollouts(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "training to start", func() bool { return m.Trainer.Stats().Version >= 3 })
	eventually(t, 10*time.Second, "both hosts to hold sessions", func() bool { return m.Hosts[0].Active() > 0 && m.Hosts[1].Active() > 0 })
	m.KillEnvHost(0)
	killedAt := m.Trainer.Stats().Version
	// Calls in flight to the dead host time out (CallTimeout); later ones find no responders at once.
	eventually(t, 30*time.Second, "the dead host's breaker to open", func() bool { return m.Rollouts[0].Status().BreakerOpens > 0 })
	eventually(t, 90*time.Second, "training to go on with one host", func() bool { return m.Trainer.Stats().Version >= killedAt+10 })
	m.StopRollouts()
	st := m.Rollouts[0].Status()
	if st.InfraFailures == 0 {
		t.Fatalf("no infrastructure failures counted after a host died: %+v", st)
	}
	if st.BreakerOpens == 0 {
		t.Fatalf("the dead host's breaker never opened: %+v", st)
	}

	nc := connect(t, url)
	js, err := bus.JetStream(nc)
	if err != nil {
		t.Fatal(err)
	}
	masked := 0
	forEach(t, ctx, js, proto.StreamEpisodes, func(data []byte) {
		var ep proto.Episode
		if err := decode(data, &ep); err != nil {
			t.Fatal(err)
		}
		if ep.InfraFailure {
			masked++
			if masked <= 3 {
				t.Logf("masked episode %s: %s", ep.ID, ep.Failure)
			}
		}
	})
	trained := 0
	forEach(t, ctx, js, proto.StreamTrain, func(data []byte) {
		var tb proto.TrainBatch
		if err := decode(data, &tb); err != nil {
			t.Fatal(err)
		}
		for _, e := range tb.Episodes {
			trained++
			if e.Episode.InfraFailure {
				t.Fatalf("infrastructure failure %s reached the trainer in batch %s", e.Episode.ID, tb.ID)
			}
		}
	})
	if int64(masked) != st.InfraFailures {
		t.Fatalf("rollout counted %d infrastructure failures, the episodes stream holds %d", st.InfraFailures, masked)
	}
	t.Logf("host killed at version %d; %d episodes masked as infrastructure failures, %d trained, breaker opened %d times", killedAt, masked, trained, st.BreakerOpens)
}
