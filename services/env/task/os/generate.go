package os

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"

	"github.com/jetrl/jetrl/proto"
)

// Generation bounds.
const (
	maxAttempts    = 10_000
	heldoutModulus = 5
)

// qkind is a kind of question.
type qkind int

const (
	qCount  qkind = iota // lines of a service's log with a level
	qConfig              // a key's value in a service's configuration
	qFiles               // files in a user's home, hidden and nested included
	qTop                 // the most frequent user of an app's list
	qSize                // bytes of a service's configuration file
	numKinds
)

// The base directories the questions name; ls of each is always admissible.
const (
	dirEtc  = "/etc"
	dirHome = "/home"
	dirSrv  = "/srv"
	dirLog  = "/var/log"
)

func bases() []string { return []string{dirEtc, dirHome, dirSrv, dirLog} }

// question is what is asked and how the solver finds it.
type question struct {
	kind     qkind
	text     string
	entity   string // the service, user or app asked about
	detail   string // the level, key or list
	base     string // the directory the question names, where the session starts
	queryDir string // the directory that must be listed last for the query to be admissible
	target   string // the file or directory the query reads, as an absolute path
	queryFmt string // the query with %s for the target's path, relative to the working directory
	answer   string
}

// world is what an instance is made of before contents: the host, what is installed and the question.
type world struct {
	host     string
	services []string
	users    []string
	apps     []string
	q        question
}

// splitStream separates the random streams of the two splits, so seed 7 of train and of heldout differ.
func splitStream(split string) uint64 {
	h := fnv.New64a()
	h.Write([]byte("os/" + split))
	return h.Sum64()
}

// opening is the first observation: the host the agent is logged in on.
func (w *world) opening() string {
	return fmt.Sprintf("You are logged in as root on %s. The working directory is %s.", w.host, w.q.base)
}

// splitKey hashes what the opening shows: the question and the host.
func (w *world) splitKey() uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s|%s", w.q.text, w.opening())
	return h.Sum64()
}

// generate draws the instance of (split, seed): a host and question whose split key falls in the split,
// then the filesystem, whose contents the opening does not show.
func generate(split string, seed uint64) (*game, error) {
	rng := rand.New(rand.NewPCG(seed, splitStream(split)))
	wantHeldout := split == proto.SplitHeldout
	for range maxAttempts {
		w := drawWorld(rng)
		if (w.splitKey()%heldoutModulus == 0) != wantHeldout {
			continue
		}
		g, ok := build(rng, w)
		if !ok {
			continue
		}
		return g, nil
	}
	return nil, errors.New("os: no instance found for this split and seed")
}

// pick draws k distinct names from pool, in pool order.
func pick(rng *rand.Rand, pool []string, k int) []string {
	idx := rng.Perm(len(pool))[:k]
	slices.Sort(idx)
	out := make([]string, k)
	for i, j := range idx {
		out[i] = pool[j]
	}
	return out
}

func drawWorld(rng *rand.Rand) *world {
	hp := hostPrefixes()
	w := &world{
		host:     fmt.Sprintf("%s-%02d", hp[rng.IntN(len(hp))], 1+rng.IntN(40)),
		services: pick(rng, services(), 3+rng.IntN(3)),
		users:    pick(rng, users(), 3+rng.IntN(3)),
		apps:     pick(rng, apps(), 2+rng.IntN(3)),
	}
	q := &w.q
	q.kind = qkind(rng.IntN(int(numKinds)))
	switch q.kind {
	case qCount:
		q.entity = w.services[rng.IntN(len(w.services))]
		q.detail = levels()[rng.IntN(len(levels()))]
		q.text = fmt.Sprintf("How many lines of the %s service's log contain %s? Each service logs to its own directory under /var/log.", q.entity, q.detail)
		q.base, q.queryDir = dirLog, dirLog+"/"+q.entity
	case qConfig:
		q.entity = w.services[rng.IntN(len(w.services))]
		q.detail = confKeys()[rng.IntN(len(confKeys()))]
		q.text = fmt.Sprintf("What is the value of %s in the %s service's configuration? Each service keeps its configuration in its own directory under /etc.", q.detail, q.entity)
		q.base, q.queryDir = dirEtc, dirEtc+"/"+q.entity
	case qSize:
		q.entity = w.services[rng.IntN(len(w.services))]
		q.text = fmt.Sprintf("What is the size in bytes of the %s service's configuration file? Each service keeps its configuration in its own directory under /etc.", q.entity)
		q.base, q.queryDir = dirEtc, dirEtc+"/"+q.entity
	case qFiles:
		q.entity = w.users[rng.IntN(len(w.users))]
		q.text = fmt.Sprintf("How many files, including hidden files and files in subdirectories, are in %s's home directory under /home?", q.entity)
		q.base, q.queryDir = dirHome, dirHome
		q.target, q.queryFmt = dirHome+"/"+q.entity, countFmt
	case qTop:
		q.entity = w.apps[rng.IntN(len(w.apps))]
		q.detail = lists()[rng.IntN(len(lists()))]
		q.text = fmt.Sprintf("Which user appears most often in the %s list of the %s app? Each app keeps its data in its own directory under /srv.", q.detail, q.entity)
		q.base, q.queryDir = dirSrv, dirSrv+"/"+q.entity
	}
	return w
}

// stamp draws an ls -l time.
func stamp(rng *rand.Rand) string {
	months := []string{"Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"}
	return fmt.Sprintf("%s %2d %02d:%02d", months[rng.IntN(12)], 1+rng.IntN(28), rng.IntN(24), rng.IntN(60))
}

// build fills the filesystem, writes the query for the target file and reads the answer off the query's
// real output; ok is false when the draw gives no unambiguous answer (the caller draws again).
func build(rng *rand.Rand, w *world) (*game, bool) {
	f := newFS()
	for _, d := range []string{"/etc", "/home", "/root", "/srv", "/tmp", "/var/log"} {
		f.mkdirAll(d, "root", stamp(rng))
	}
	f.addFile("/etc/hostname", w.host+"\n", "root", stamp(rng), kindText)
	f.addFile("/root/.bashrc", "alias ll='ls -l'\n", "root", stamp(rng), kindText)
	q := &w.q
	for _, svc := range w.services {
		conf := buildService(rng, f, svc, q)
		if svc == q.entity && (q.kind == qConfig || q.kind == qSize) {
			if q.kind == qConfig && !slices.Contains(conf.keys, q.detail) {
				return nil, false
			}
		}
	}
	for _, u := range w.users {
		buildHome(rng, f, u)
	}
	for _, app := range w.apps {
		buildApp(rng, f, app, q)
	}
	f.finish()
	if q.kind == qTop && f.lookup(q.queryDir) == nil {
		return nil, false
	}
	if q.target == "" {
		return nil, false
	}
	sh := shell{fs: f, cwd: "/"}
	query := fmt.Sprintf(q.queryFmt, q.target)
	r, err := sh.run(query)
	if err != nil || r.stderr != "" {
		return nil, false
	}
	out := strings.TrimSpace(r.stdout)
	switch q.kind {
	case qCount, qFiles:
		if _, err := strconv.Atoi(out); err != nil {
			return nil, false
		}
		q.answer = out
	case qSize:
		q.answer = strings.Fields(out)[0]
	case qConfig:
		if strings.Contains(out, "\n") {
			return nil, false // the key matched more than one line
		}
		_, v, ok := strings.Cut(out, "=")
		if !ok {
			_, v, ok = strings.Cut(out, ":")
		}
		if !ok || strings.TrimSpace(v) == "" {
			return nil, false
		}
		q.answer = strings.TrimSpace(v)
	case qTop:
		second, err := sh.run(strings.Replace(query, "head -n 1", "head -n 2", 1))
		top := strings.Fields(out)
		if err != nil || len(top) != 2 {
			return nil, false
		}
		if rows := lines(second.stdout); len(rows) == 2 && leadingNumber(rows[0]) == leadingNumber(rows[1]) {
			return nil, false // a tie has no single answer
		}
		q.answer = top[1]
	}
	if !slices.Contains(valueTokens(r.stdout), q.answer) {
		return nil, false
	}
	g := &game{fs: f, sh: shell{fs: f, cwd: q.base}, q: *q, instruction: q.text, openObs: w.opening()}
	g.opening = g.open()
	return g, true
}

// buildService writes /etc/SVC (a configuration file, maybe a README) and /var/log/SVC (a log, maybe a
// rotated one), and sets the query when the question is about this service.
func buildService(rng *rand.Rand, f *fsys, svc string, q *question) *node {
	// configuration
	names := confNames()
	name := names[rng.IntN(len(names))]
	if strings.Contains(name, "%s") {
		name = fmt.Sprintf(name, svc)
	}
	yaml := strings.HasSuffix(name, ".yaml")
	keys := pick(rng, confKeys(), 4+rng.IntN(3))
	if q.entity == svc && q.kind == qConfig && !slices.Contains(keys, q.detail) {
		keys[rng.IntN(len(keys))] = q.detail
	}
	rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	var b strings.Builder
	b.WriteString("# service settings\n")
	if strings.HasSuffix(name, ".ini") {
		b.WriteString("[main]\n")
	}
	for _, k := range keys {
		if yaml {
			fmt.Fprintf(&b, "%s: %s\n", k, confValue(rng, k, svc))
		} else {
			fmt.Fprintf(&b, "%s = %s\n", k, confValue(rng, k, svc))
		}
	}
	confPath := fmt.Sprintf("%s/%s/%s", dirEtc, svc, name)
	conf := f.addFile(confPath, b.String(), "root", stamp(rng), kindConf)
	conf.keys = keys
	if rng.IntN(2) == 0 {
		f.addFile(fmt.Sprintf("%s/%s/README", dirEtc, svc), fmt.Sprintf("Settings of the %s service.\nRestart it after a change.\n", svc), "root", stamp(rng), kindText)
	}
	// log
	ln := logNames()[rng.IntN(len(logNames()))]
	logPath := fmt.Sprintf("%s/%s/%s", dirLog, svc, ln)
	f.addFile(logPath, logLines(rng, svc, 12+rng.IntN(30)), "root", stamp(rng), kindLog)
	if rng.IntN(3) == 0 {
		f.addFile(logPath+".1", logLines(rng, svc, 10+rng.IntN(20)), "root", stamp(rng), kindText)
	}
	if q.entity == svc {
		switch q.kind {
		case qCount:
			q.target, q.queryFmt = logPath, "grep -c "+q.detail+" %s"
		case qConfig:
			q.target, q.queryFmt = confPath, "grep "+q.detail+" %s"
		case qSize:
			q.target, q.queryFmt = confPath, "wc -c %s"
		}
	}
	return conf
}

// confValue draws a plausible value for a configuration key.
func confValue(rng *rand.Rand, key, svc string) string {
	switch key {
	case "port":
		return strconv.Itoa(1024 + rng.IntN(9000))
	case "host":
		return []string{"0.0.0.0", "127.0.0.1", "db.internal", "10.0.3.17", "localhost"}[rng.IntN(5)]
	case "workers":
		return strconv.Itoa(1 + rng.IntN(32))
	case "timeout":
		return strconv.Itoa(5 + rng.IntN(116))
	case "retries":
		return strconv.Itoa(rng.IntN(11))
	case "log_level":
		return []string{"debug", "info", "warning", "critical"}[rng.IntN(4)]
	case "max_connections":
		return strconv.Itoa(10 * (1 + rng.IntN(100)))
	case "user":
		return []string{"www-data", "svc", "nobody", "daemon", "app"}[rng.IntN(5)]
	case "cache_size":
		return fmt.Sprintf("%dM", 16*(1+rng.IntN(32)))
	}
	return "/var/lib/" + svc
}

// logLines writes n log lines; each level occurs with its own frequency.
func logLines(rng *rand.Rand, svc string, n int) string {
	lv := levels()
	msgs := make([][]string, len(lv))
	for i, l := range lv {
		msgs[i] = messages(l)
	}
	weights := []int{15, 20, 45, 20} // ERROR, WARN, INFO, DEBUG
	h, m, s := rng.IntN(24), rng.IntN(60), rng.IntN(60)
	date := fmt.Sprintf("2024-03-%02d ", 1+rng.IntN(28))
	b := make([]byte, 0, n*64)
	two := func(b []byte, v int) []byte { return append(b, byte('0'+v/10), byte('0'+v%10)) }
	for range n {
		x, k := rng.IntN(100), 0
		for k < len(weights)-1 && x >= weights[k] {
			x -= weights[k]
			k++
		}
		s += 1 + rng.IntN(50)
		m += s / 60
		h += m / 60
		s, m, h = s%60, m%60, h%24
		b = append(b, date...)
		b = append(two(append(two(append(two(b, h), ':'), m), ':'), s), ' ')
		b = append(append(append(append(append(b, lv[k]...), " ["...), svc...), "] "...), msgs[k][rng.IntN(len(msgs[k]))]...)
		b = append(b, '\n')
	}
	return string(b)
}

// buildHome writes a user's home: dotfiles, some visible files and maybe subdirectories.
func buildHome(rng *rand.Rand, f *fsys, u string) {
	home := dirHome + "/" + u
	f.mkdirAll(home, u, stamp(rng))
	f.addFile(home+"/.bashrc", "export PS1='\\u@\\h:\\w$ '\n", u, stamp(rng), kindText)
	if rng.IntN(2) == 0 {
		f.addFile(home+"/.profile", "[ -f ~/.bashrc ] && . ~/.bashrc\n", u, stamp(rng), kindText)
	}
	if rng.IntN(2) == 0 {
		f.addFile(home+"/.bash_history", "ls\ncd /tmp\n", u, stamp(rng), kindText)
	}
	if rng.IntN(3) == 0 {
		f.addFile(home+"/.ssh/authorized_keys", "ssh-ed25519 AAAAC3Nza "+u+"@laptop\n", u, stamp(rng), kindText)
	}
	hf := homeFiles()
	for _, i := range rng.Perm(len(hf))[:1+rng.IntN(4)] {
		f.addFile(home+"/"+hf[i][0], hf[i][1], u, stamp(rng), kindText)
	}
	hd := homeDirs()
	for _, i := range rng.Perm(len(hd))[:rng.IntN(3)] {
		files := hd[i].files
		for _, j := range rng.Perm(len(files))[:1+rng.IntN(len(files))] {
			f.addFile(home+"/"+hd[i].name+"/"+files[j], "data\n", u, stamp(rng), kindText)
		}
	}
}

// buildApp writes an app's lists, one user name per line in random order, and sets the query when the
// question is about this app's list.
func buildApp(rng *rand.Rand, f *fsys, app string, q *question) {
	ls := pick(rng, lists(), 2+rng.IntN(2))
	if q.kind == qTop && q.entity == app && !slices.Contains(ls, q.detail) {
		ls[rng.IntN(len(ls))] = q.detail
	}
	exts := []string{"txt", "log", "lst"}
	for _, l := range ls {
		names := pick(rng, users(), 3+rng.IntN(4))
		counts := make([]int, len(names))
		for i := range counts {
			counts[i] = 1 + rng.IntN(8)
		}
		top := slices.Max(counts)
		if i := slices.Index(counts, top); slices.Contains(counts[i+1:], top) {
			counts[i]++ // one most frequent user, so the question has one answer
		}
		var rows []string
		for i, u := range names {
			for range counts[i] {
				rows = append(rows, u)
			}
		}
		rng.Shuffle(len(rows), func(i, j int) { rows[i], rows[j] = rows[j], rows[i] })
		p := fmt.Sprintf("%s/%s/%s.%s", dirSrv, app, l, exts[rng.IntN(len(exts))])
		f.addFile(p, strings.Join(rows, "\n")+"\n", "root", stamp(rng), kindList)
		if q.kind == qTop && q.entity == app && l == q.detail {
			q.target, q.queryFmt = p, topFmt
		}
	}
}

// Query formats shared by the generator and the admissible list: the most frequent line of a file with
// its count, and the number of files under a directory.
const (
	topFmt   = "sort %s | uniq -c | sort -n -r | head -n 1"
	countFmt = "find %s -type f | wc -l"
)
