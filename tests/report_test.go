package tests

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestReportSmoke runs `jetrl report` in miniature (one seed, seconds of training, one family) and checks
// that every run happened and the table, JSON and curves were written from them.
func TestReportSmoke(t *testing.T) {
	bin := binaries(t)
	out := t.TempDir()
	cmd := exec.Command(filepath.Join(bin, "jetrl"), "report", "--out", out, "--tasks", "db", "--seeds", "1",
		"--minutes", "0.1", "--single-minutes", "0.1", "--eval-episodes", "20", "--command", "jetrl report --smoke")
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("jetrl report: %v\n%s", err, b)
	}
	for _, method := range []string{"full", "no-task-norm", "no-cross-policy", "single-db"} {
		if _, err := os.Stat(filepath.Join(out, "runs", method, "seed-1", "summary.json")); err != nil {
			t.Errorf("run %s: %v", method, err)
		}
	}
	md, err := os.ReadFile(filepath.Join(out, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| full method (all families together) | 1 |", "| without task advantage normalization | 1 |",
		"| without cross-policy sampling | 1 |", "| each family trained alone | 1 |", "| scripted solver (reads hidden state) | – | 100.0 |",
		"The paper (14B model) reports 65.0", "`jetrl report --smoke`"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report.md lacks %q:\n%s", want, md)
		}
	}
	var rep struct {
		Rows []struct {
			Method  string                                 `json:"method"`
			Success map[string]struct{ Mean, Std float64 } `json:"success"`
		} `json:"rows"`
	}
	j, err := os.ReadFile(filepath.Join(out, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(j, &rep); err != nil || len(rep.Rows) != 4 {
		t.Fatalf("report.json: %v, %d rows", err, len(rep.Rows))
	}
	if png, err := os.ReadFile(filepath.Join(out, "curves.png")); err != nil || string(png[1:4]) != "PNG" {
		t.Fatalf("curves.png: %v", err)
	}
	// A second invocation reuses the finished runs instead of training again.
	b, err = exec.Command(filepath.Join(bin, "jetrl"), "report", "--out", out, "--tasks", "db", "--seeds", "1",
		"--minutes", "0.1", "--single-minutes", "0.1", "--eval-episodes", "20").CombinedOutput()
	if err != nil || strings.Contains(string(b), ": training ") {
		t.Fatalf("resumed report trained again or failed: %v\n%s", err, b)
	}
}
