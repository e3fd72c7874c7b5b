package env_test

import (
	"testing"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/services/env"
	"github.com/jetrl/jetrl/services/env/task/builtin"
	"github.com/jetrl/jetrl/services/env/task/kg"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// The host exports what the families' caches of recent instances hold and how their lookups went.
func TestCacheMetrics(t *testing.T) {
	f := newFixture(t)
	reg := prometheus.NewRegistry()
	h, err := env.New(env.Config{}, env.Deps{Conn: f.conn(t), Families: builtin.Registry(), Log: zerolog.Nop(), Metrics: reg})
	if err != nil {
		t.Fatal(err)
	}
	runHost(t, h)
	c := f.client(t)
	// Three sessions of one instance (the first generates it), one of another.
	for i, seed := range []uint64{7, 7, 7, 8} {
		if _, err := c.Start(testCtx(t), proto.EnvStartRequest{Task: kg.Name, Split: proto.SplitTrain, Seed: seed, EpisodeID: "e"}); err != nil {
			t.Fatalf("start %d: %v", i, err)
		}
	}
	got := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue()
			got[mf.GetName()+"/"+labels["task"]+"/"+labels["cache"]] = v
		}
	}
	want := map[string]float64{
		"jetrl_env_cache_hits_total/kg/instances":   2,
		"jetrl_env_cache_misses_total/kg/instances": 2,
		"jetrl_env_cache_kept/kg/instances":         2,
		"jetrl_env_cache_hits_total/db/images":      0,
		"jetrl_env_cache_misses_total/db/instances": 0,
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (exported %v), want %v", k, g, ok, v)
		}
	}
	if _, ok := got["jetrl_env_cache_hits_total/alfworld/instances"]; ok {
		t.Error("alfworld keeps no cache but one is exported")
	}
}
