package main

import (
	"testing"

	"github.com/jetrl/jetrl/services/trainer"
	"github.com/jetrl/jetrl/shared/config"
)

// The flags' defaults are the trainer's (and jetrl up's), and the objective comes from the run config
// like every other setting.
func TestObjectiveFlags(t *testing.T) {
	var c cli
	if _, err := config.Parse(&c, nil, nil); err != nil {
		t.Fatal(err)
	}
	if got, expected := c.trainerConfig(), trainer.DefaultConfig(); got.Loss != expected.Loss || got.Epochs != expected.Epochs || got.Eta != expected.Eta {
		t.Errorf("defaults %+v, expected %+v", got, expected)
	}
	rc, err := config.ParseRunConfig([]byte(`{"clip": 0.1, "dual_clip": 0, "kl_coef": 0.001, "entropy_coef": 0, "correction": "truncated", "is_cap": 1.5}`))
	if err != nil {
		t.Fatal(err)
	}
	c = cli{}
	if _, err := config.Parse(&c, []string{"--clip", "0.3"}, rc); err != nil {
		t.Fatal(err)
	}
	expected := trainer.Objective{Clip: 0.3, DualClip: 0, KLCoef: 0.001, EntropyCoef: 0, Correction: trainer.CorrectionTruncated, ISCap: 1.5}
	if got := c.trainerConfig().Loss; got != expected {
		t.Errorf("objective %+v, expected %+v", got, expected)
	}
	if err := c.trainerConfig().Loss.Validate(); err != nil {
		t.Error(err)
	}
}
