// Package db is a SQL task family after AgentBench's DBBench (function-call version): each session owns a
// real SQLite database (modernc.org/sqlite, in memory, pure Go) holding one or two generated tables, and
// asks a question about them or a change to them. The agent runs SQL with execute_sql and ends the
// episode with commit_final_answer.
//
// Query tasks (look up a value, list values, count, sum, avg, max, min) are checked by comparing the
// committed answer, a comma-separated list, as a set of values with numbers normalized. Mutation tasks
// (UPDATE, INSERT, DELETE asked in words) are checked, as DBBench does, by a digest of the table's content
// when the agent commits (any answer, e.g. "done").
//
// The opening names the tables but not their columns; a table's columns and first rows show once the
// agent looks at it (SELECT * FROM t LIMIT 5). Each observation comes with admissible calls: looking at
// each table, then (once the asked table has been seen) the right statement among wrong variants (wrong
// column, condition value, aggregate or table; for changes, wrong UPDATE, INSERT or DELETE variants), and
// commit_final_answer with values that earlier queries returned, so the right answer becomes admissible
// only after the query that reveals it.
//
// # Resources
//
// The database is opened at the first execute_sql and closed when the episode ends (a commit, or the
// turn limit's last call). An instance abandoned earlier should be released with its Close method
//
//	Close() error
//
// which the env host calls when an instance has one (task.Instance does not declare it); the garbage
// collector closes a forgotten database as a last resort.
package db

import (
	"sync/atomic"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/services/env/task"
)

// The family's name, turn limit and tools, as in AgentBench.
const (
	Name       = "db"
	MaxTurns   = 15
	ToolSQL    = "execute_sql"
	ToolCommit = "commit_final_answer"
)

const (
	sqlParameters    = `{"type":"object","properties":{"sql":{"type":"string","description":"One SQLite statement, e.g. \"SELECT * FROM employees LIMIT 5\" or \"UPDATE employees SET salary = 80000 WHERE name = 'Alice Smith'\"."}},"required":["sql"]}`
	commitParameters = `{"type":"object","properties":{"answer":{"type":"string","description":"The answer: for a question, the values as a comma-separated list (e.g. \"Alice Smith, Bruno Jones\" or \"42\"); after a change, anything (e.g. \"done\")."}},"required":["answer"]}`
)

// imagesKept is how many instances a family keeps, generated and as database images: 128 covers 128 db
// groups starting at once on one host. An image is two or three 4 KiB pages (10 KiB on average over 200 instances), its key
// the setup script (1.8 KiB on average): about 1.5 MiB when full.
const imagesKept = 128

// imageCache keeps the serialized database of recent instances, keyed by their setup script: every
// session after an instance's first opens its database by copying the image's pages instead of parsing
// and running the script again.
type imageCache = task.Recent[string, []byte]

// Family generates db instances. Its state is a counter naming session databases and the images of
// recent instances' databases, both safe for concurrent use, so one value serves any number of
// goroutines.
type Family struct {
	sessions atomic.Uint64
	images   *imageCache // nil in a zero Family: every session runs its setup script
	// recent keeps freshly generated games, never played: a session of an instance generated lately
	// plays a game that shares its tables, goal and statements (see game.fresh).
	recent *task.Recent[task.InstanceKey, *game]
}

// New returns the db family.
func New() *Family {
	return &Family{images: task.NewRecent[string, []byte](imagesKept), recent: task.NewRecent[task.InstanceKey, *game](imagesKept)}
}

// Caches reports the recent instances and database images kept (task.Caching).
func (f *Family) Caches() map[string]task.CacheStats {
	return map[string]task.CacheStats{"instances": f.recent.Stats(), "images": f.images.Stats()}
}

// Name is "db".
func (*Family) Name() string { return Name }

// MaxTurns is 15, AgentBench's limit for DBBench.
func (*Family) MaxTurns() int { return MaxTurns }

// Tools are execute_sql and commit_final_answer, in a fresh slice so callers cannot change another's.
func (*Family) Tools() []proto.Tool {
	return []proto.Tool{
		{
			Name:        ToolSQL,
			Description: "Run one SQL statement on the task's SQLite database and see the rows it returns (or how many rows it changed, or the error).",
			Parameters:  sqlParameters,
		},
		{
			Name:        ToolCommit,
			Description: "Commit the final answer and end the episode: the values that answer the question, comma-separated, or anything (e.g. \"done\") once the requested change is made.",
			Parameters:  commitParameters,
		},
	}
}

// New generates the instance of (split, seed). Held-out instances are those whose opening (question and
// table list) hashes to 0 modulo 5, so no opening, hence no instance, occurs in both splits. The instance
// opens its database lazily; see the package doc for Close.
func (f *Family) New(split string, seed uint64) (task.Instance, error) {
	if err := task.ValidSplit(split); err != nil {
		return nil, err
	}
	kept, err := f.recent.Load(task.InstanceKey{Split: split, Seed: seed}, func() (*game, error) { return generate(split, seed) })
	if err != nil {
		return nil, err
	}
	g := kept.fresh()
	g.dbName = dbName(split, seed, f.sessions.Add(1))
	g.images = f.images
	return g, nil
}
