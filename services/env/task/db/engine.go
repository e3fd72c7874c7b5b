package db

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// Engine bounds: one agent statement may not run long, return much or grow the database much, so a
// session stays cheap whatever SQL an agent sends. The time bound is wall-clock (the driver keeps
// SQLite's progress handler to itself); the statements a task needs take about 0.1 ms, so it is
// generous enough that a loaded machine or the race detector never trips it on them.
const (
	stmtTimeout  = 2 * time.Second
	maxFetchRows = 200     // rows read from one result; more are reported as "200+"
	maxShownRows = 20      // rows printed in an observation
	maxCellRunes = 40      // longer cells are cut with "…"
	maxObsBytes  = 3000    // an observation's table is cut beyond this
	maxValueLen  = 100_000 // SQLITE_LIMIT_LENGTH: longest string or blob
	maxSQLLen    = 10_000  // SQLITE_LIMIT_SQL_LENGTH: longest statement
	maxPages     = 2048    // max_page_count: 8 MiB of 4 KiB pages
)

// engine is one session's private in-memory SQLite database, on one pinned connection.
type engine struct {
	db      *sql.DB
	conn    *sql.Conn
	timeout time.Duration // per statement
}

// openEngine opens a fresh in-memory database called name, runs the setup script (trusted SQL that
// creates and fills the tables), or copies its image from images when an earlier session ran it, then
// locks the connection down for agent statements. images may be nil.
func openEngine(name, setup string, images *imageCache) (*engine, error) {
	// cache=private gives every connection its own database; the unique name keeps it that way even if
	// a shared cache were ever turned on. _defensive forbids corrupting the schema through SQL.
	db, err := sql.Open("sqlite", "file:"+name+"?mode=memory&cache=private&_defensive=1")
	if err != nil {
		return nil, err
	}
	// One connection, never recycled: a second or a reopened connection would be an empty database.
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		db.Close()
		return nil, err
	}
	e := &engine{db: db, conn: conn, timeout: stmtTimeout}
	if err := e.setup(ctx, setup, images); err != nil {
		e.close()
		return nil, err
	}
	return e, nil
}

// imageConn is what the driver's connection offers to copy a database's pages in and out
// (sqlite3_serialize and sqlite3_deserialize).
type imageConn interface {
	Serialize() ([]byte, error)
	Deserialize([]byte) error
}

func (e *engine) setup(ctx context.Context, script string, images *imageCache) error {
	img, _ := images.Get(script)
	if img != nil {
		// The driver copies the image into the database's own memory: the session's changes stay its own.
		if err := e.raw(func(c imageConn) error { return c.Deserialize(img) }); err != nil {
			return fmt.Errorf("db: loading the session database's image: %w", err)
		}
		script = ""
	}
	// After the image: the page bound belongs to the database the connection has now.
	pragmas := fmt.Sprintf("PRAGMA temp_store = MEMORY; PRAGMA max_page_count = %d;", maxPages)
	if _, err := e.conn.ExecContext(ctx, pragmas+script); err != nil {
		return fmt.Errorf("db: setting up the session database: %w", err)
	}
	if img == nil && images != nil {
		var fresh []byte
		if err := e.raw(func(c imageConn) (err error) { fresh, err = c.Serialize(); return err }); err != nil {
			return fmt.Errorf("db: keeping the session database's image: %w", err)
		}
		if len(fresh) > 0 {
			images.Put(script, fresh)
		}
	}
	for _, l := range []struct{ id, v int }{
		{sqlite3.SQLITE_LIMIT_LENGTH, maxValueLen},
		{sqlite3.SQLITE_LIMIT_SQL_LENGTH, maxSQLLen},
		{sqlite3.SQLITE_LIMIT_ATTACHED, 0},
	} {
		if _, err := sqlite.Limit(e.conn, l.id, l.v); err != nil {
			return fmt.Errorf("db: limiting the session database: %w", err)
		}
	}
	return e.conn.Raw(func(dc any) error {
		r, ok := dc.(sqlite.AuthorizerRegisterer)
		if !ok {
			return fmt.Errorf("db: driver connection %T has no authorizer", dc)
		}
		return r.RegisterAuthorizer(authorize)
	})
}

// raw calls f with the driver's connection.
func (e *engine) raw(f func(imageConn) error) error {
	return e.conn.Raw(func(dc any) error {
		c, ok := dc.(imageConn)
		if !ok {
			return fmt.Errorf("db: driver connection %T cannot serialize", dc)
		}
		return f(c)
	})
}

// authorize keeps agent SQL inside its own database: no files (ATTACH), no extensions, no settings.
func authorize(action sqlite.AuthorizerActionCode, arg1, arg2, _, _ string) sqlite.AuthorizerReturnCode {
	switch action {
	case sqlite.AuthAttach, sqlite.AuthDetach:
		return sqlite.AuthorizerDeny
	case sqlite.AuthPragma:
		// only the schema-reading PRAGMAs, and only to read (a second argument sets a value)
		switch strings.ToLower(arg1) {
		case "table_info", "table_xinfo", "table_list", "index_list", "index_info", "foreign_key_list":
			return sqlite.AuthorizerOK
		}
		return sqlite.AuthorizerDeny
	case sqlite.AuthFunction:
		if strings.EqualFold(arg2, "load_extension") {
			return sqlite.AuthorizerDeny
		}
	}
	return sqlite.AuthorizerOK
}

// close releases the database; it is safe to call more than once.
func (e *engine) close() error {
	if e == nil || e.db == nil {
		return nil
	}
	err := errors.Join(e.conn.Close(), e.db.Close())
	e.conn, e.db = nil, nil
	return err
}

// result is what one statement did: the rows of a query, or the rows a change affected.
type result struct {
	query     bool
	cols      []string
	rows      [][]string // at most maxFetchRows
	more      bool       // the query had more than maxFetchRows rows
	affected  int64
	statement string // the first keyword, upper-cased
}

// run executes one agent statement under the engine's time bound.
func (e *engine) run(stmt string) (result, error) {
	if e == nil || e.conn == nil {
		return result{}, errors.New("the session database is closed")
	}
	kw, err := checkStatement(stmt)
	if err != nil {
		return result{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
	defer cancel()
	r := result{statement: kw}
	if !returnsRows(kw) {
		res, err := e.conn.ExecContext(ctx, stmt)
		if err != nil {
			return r, e.sqlError(ctx, err)
		}
		r.affected, _ = res.RowsAffected() // the driver always knows the change count
		return r, nil
	}
	r.query = true
	rows, err := e.conn.QueryContext(ctx, stmt)
	if err != nil {
		return r, e.sqlError(ctx, err)
	}
	defer rows.Close()
	if r.cols, err = rows.Columns(); err != nil {
		return r, e.sqlError(ctx, err)
	}
	vals := make([]any, len(r.cols))
	ptrs := make([]any, len(r.cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	for rows.Next() {
		if len(r.rows) == maxFetchRows {
			r.more = true
			break
		}
		if err := rows.Scan(ptrs...); err != nil {
			return r, e.sqlError(ctx, err)
		}
		row := make([]string, len(vals))
		for i, v := range vals {
			row[i] = cellText(v)
		}
		r.rows = append(r.rows, row)
	}
	if err := rows.Err(); err != nil {
		return r, e.sqlError(ctx, err)
	}
	return r, nil
}

// sqlError is the engine's error text, or a plain note that the statement ran out of time.
func (e *engine) sqlError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("statement interrupted after %v (too slow; add a WHERE or a LIMIT)", e.timeout)
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		return errors.New(strings.TrimSpace(se.Error()))
	}
	return err
}

// returnsRows reports whether a statement starting with keyword kw is run as a query.
func returnsRows(kw string) bool {
	switch kw {
	case "SELECT", "WITH", "VALUES", "PRAGMA", "EXPLAIN":
		return true
	}
	return false
}

// cellText renders one SQLite value as the sqlite3 shell would, floats cut to 4 decimals.
func cellText(v any) string {
	switch x := v.(type) {
	case nil:
		return "NULL"
	case int64:
		return strconv.FormatInt(x, 10)
	case float64:
		return formatFloat(x)
	case string:
		return x
	case []byte:
		if utf8.Valid(x) {
			return string(x)
		}
		return "x'" + hex.EncodeToString(x) + "'"
	case bool:
		if x {
			return "1"
		}
		return "0"
	case time.Time:
		return x.Format(time.RFC3339)
	}
	return fmt.Sprint(v)
}

// formatFloat prints f with at most 4 decimals and no trailing zeros ("61333.3333", "7.5", "42").
func formatFloat(f float64) string {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return strconv.FormatFloat(f, 'g', -1, 64)
	}
	if math.Abs(f) < 1e15 {
		f = math.Round(f*1e4) / 1e4
	}
	return strconv.FormatFloat(f, 'f', -1, 64)
}

// tableHash is an order-insensitive digest of a table's content, as DBBench checks a mutation: the
// sorted rows of SELECT *, each a tab-joined line.
func (e *engine) tableHash(table string) (string, error) {
	if e == nil || e.conn == nil {
		return "", errors.New("the session database is closed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
	defer cancel()
	rows, err := e.conn.QueryContext(ctx, "SELECT * FROM "+quoteIdent(table))
	if err != nil {
		return "", e.sqlError(ctx, err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return "", err
	}
	vals := make([]any, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	var lines [][]string
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return "", err
		}
		line := make([]string, len(vals))
		for i, v := range vals {
			line[i] = cellText(v)
		}
		lines = append(lines, line)
	}
	if err := rows.Err(); err != nil {
		return "", e.sqlError(ctx, err)
	}
	return hashRows(cols, lines), nil
}

// hashRows digests a header and rows regardless of row order.
func hashRows(cols []string, rows [][]string) string {
	lines := make([]string, len(rows))
	for i, r := range rows {
		lines[i] = strings.Join(r, "\t")
	}
	slices.Sort(lines)
	h := sha256.New()
	fmt.Fprintf(h, "%s\n", strings.Join(cols, "\t"))
	for _, l := range lines {
		fmt.Fprintf(h, "%s\n", l)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// quoteIdent quotes an SQL identifier.
func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// quoteText quotes an SQL string literal.
func quoteText(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// render prints a result as a compact text table, as the observation of execute_sql.
func (r result) render() string {
	if !r.query {
		noun := "rows"
		if r.affected == 1 {
			noun = "row"
		}
		return fmt.Sprintf("Query OK, %d %s affected.", r.affected, noun)
	}
	if len(r.cols) == 0 {
		return "Query OK."
	}
	var b strings.Builder
	b.WriteString(strings.Join(r.cols, " | "))
	b.WriteByte('\n')
	shown := 0
	for _, row := range r.rows {
		if shown == maxShownRows || b.Len() > maxObsBytes {
			break
		}
		for i, c := range row {
			if i > 0 {
				b.WriteString(" | ")
			}
			b.WriteString(cut(c))
		}
		b.WriteByte('\n')
		shown++
	}
	n := strconv.Itoa(len(r.rows))
	if r.more {
		n += "+"
	}
	switch {
	case len(r.rows) == 0:
		b.WriteString("(0 rows)")
	case shown < len(r.rows) || r.more:
		fmt.Fprintf(&b, "(%d of %s rows shown)", shown, n)
	case len(r.rows) == 1:
		b.WriteString("(1 row)")
	default:
		fmt.Fprintf(&b, "(%s rows)", n)
	}
	return b.String()
}

// cut shortens a cell to maxCellRunes runes, on one line.
func cut(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= maxCellRunes {
		return s
	}
	r := []rune(s)
	return string(r[:maxCellRunes-1]) + "…"
}
