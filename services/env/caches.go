package env

import (
	"github.com/jetrl/jetrl/services/env/task"
	"github.com/prometheus/client_golang/prometheus"
)

// cacheCollector exports the caches of the families that keep what they built for recent instances
// (task.Caching): what each holds and how its lookups went, read when metrics are gathered.
type cacheCollector struct {
	families           task.Registry
	hits, misses, kept *prometheus.Desc
}

func newCacheCollector(families task.Registry) *cacheCollector {
	labels := []string{"task", "cache"}
	return &cacheCollector{
		families: families,
		hits:     prometheus.NewDesc("jetrl_env_cache_hits_total", "Lookups that found a family's kept instance state, by task and cache.", labels, nil),
		misses:   prometheus.NewDesc("jetrl_env_cache_misses_total", "Lookups that had to build a family's instance state, by task and cache.", labels, nil),
		kept:     prometheus.NewDesc("jetrl_env_cache_kept", "Values a family's cache holds, by task and cache.", labels, nil),
	}
}

func (c *cacheCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.hits
	ch <- c.misses
	ch <- c.kept
}

func (c *cacheCollector) Collect(ch chan<- prometheus.Metric) {
	for name, f := range c.families {
		caching, ok := f.(task.Caching)
		if !ok {
			continue
		}
		for cache, st := range caching.Caches() {
			ch <- prometheus.MustNewConstMetric(c.hits, prometheus.CounterValue, float64(st.Hits), name, cache)
			ch <- prometheus.MustNewConstMetric(c.misses, prometheus.CounterValue, float64(st.Misses), name, cache)
			ch <- prometheus.MustNewConstMetric(c.kept, prometheus.GaugeValue, float64(st.Kept), name, cache)
		}
	}
}
