package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/alecthomas/kong"
)

func parseUp(t *testing.T, yamlText string, args ...string) (*upCmd, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "run.yaml")
	if err := os.WriteFile(path, []byte(yamlText), 0o644); err != nil {
		t.Fatal(err)
	}
	var c cli
	p, err := kong.New(&c, kong.Configuration(loadRunConfig), kong.Exit(func(int) {}))
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Parse(append([]string{"up", "--config", path}, args...))
	return &c.Up, err
}

func TestRunConfigFile(t *testing.T) {
	cases := []struct {
		name         string
		givenYAML    string
		givenArgs    []string
		expectedErr  string
		expectedWant func(*upCmd) bool
	}{
		{"values from the file", "tasks: [alfworld, kg]\ntask_weights: {alfworld: 2}\nbatch_size: 32\ncorrection: truncated\n", nil, "",
			func(c *upCmd) bool {
				return slices.Equal(c.Tasks, []string{"alfworld", "kg"}) && c.TaskWeights["alfworld"] == 2 && c.BatchSize == 32 && c.Correction == "truncated"
			}},
		{"flags override the file", "batch_size: 32\neta: 4\n", []string{"--batch-size", "16"}, "",
			func(c *upCmd) bool { return c.BatchSize == 16 && c.Eta == 4 }},
		{"kebab-case keys", "eval-every: 10s\nno-task-norm: true\n", nil, "unknown settings no-task-norm", nil},
		{"unknown key is an error", "batch_sise: 3\n", nil, "unknown settings batch-sise", nil},
		{"bad value is an error", "correction: sometimes\n", nil, "correction", nil},
		{"not yaml", "tasks: [unclosed\n", nil, "run config", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := parseUp(t, c.givenYAML, c.givenArgs...)
			if c.expectedErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.expectedErr) {
					t.Fatalf("error %v, expected one containing %q", err, c.expectedErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !c.expectedWant(got) {
				t.Fatalf("parsed %+v", got)
			}
		})
	}
}

// The settings written to <out>/config.yaml load back to the same values.
func TestSettingsRoundTrip(t *testing.T) {
	first, err := parseUp(t, "tasks: [db, os]\ntask_weights: {db: 3}\nlr: 0.02\neval_every: 45s\n")
	if err != nil {
		t.Fatal(err)
	}
	y, err := settingsYAML(effectiveSettings(first))
	if err != nil {
		t.Fatal(err)
	}
	second, err := parseUp(t, string(y))
	if err != nil {
		t.Fatalf("reloading %s: %v", y, err)
	}
	a, b := effectiveSettings(first), effectiveSettings(second)
	for k, v := range a {
		if k == "task_weights" || k == "tasks" {
			continue
		}
		if b[k] != v {
			t.Errorf("%s: %v after the round trip, was %v", k, b[k], v)
		}
	}
	if !slices.Equal(second.Tasks, first.Tasks) || second.TaskWeights["db"] != 3 {
		t.Errorf("tasks %v %v after the round trip", second.Tasks, second.TaskWeights)
	}
}
