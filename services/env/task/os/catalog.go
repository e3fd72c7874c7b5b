package os

// The name pools instances draw from; tables only, never written after construction.

func services() []string {
	return []string{"nginx", "postgres", "redis", "payments", "billing", "auth", "mailer", "scheduler",
		"search", "inventory", "gateway", "metrics", "backup", "cache", "queue", "ledger"}
}

func users() []string {
	return []string{"alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy",
		"mallory", "nina", "oscar", "peggy", "quinn", "rupert", "sybil", "trent", "victor", "wendy"}
}

func apps() []string {
	return []string{"shop", "forum", "wiki", "blog", "crm", "helpdesk", "portal", "tracker"}
}

// lists are the per-app data files, one user name per line.
func lists() []string {
	return []string{"logins", "purchases", "uploads", "comments"}
}

func hostPrefixes() []string {
	return []string{"web", "db", "app", "ci", "build", "edge", "api", "worker", "batch", "cache"}
}

// levels are the log levels, as they appear in log lines; messages never contain them in upper case.
func levels() []string { return []string{"ERROR", "WARN", "INFO", "DEBUG"} }

// messages are log messages per level; some lower-case "error"s make grep -i differ from grep.
func messages(level string) []string {
	switch level {
	case "ERROR":
		return []string{"connection refused by upstream", "failed to write checkpoint", "request timed out after 30s",
			"could not open data file", "worker crashed with exit code 137", "certificate verification failed"}
	case "WARN":
		return []string{"slow response from upstream", "disk usage at 85%", "deprecated setting in use",
			"retrying after error: connection reset", "queue backlog growing", "cache miss ratio high"}
	case "INFO":
		return []string{"request served", "user session started", "configuration reloaded", "job finished",
			"recovered from error on retry", "listening for connections", "health check ok"}
	}
	return []string{"heartbeat", "queue depth sampled", "gc pause measured", "cache entry refreshed",
		"error counter reset"}
}

// confNames are the names a service's configuration file may have; %s is the service.
func confNames() []string {
	return []string{"%s.conf", "config.ini", "settings.yaml", "%s.yaml", "app.conf", "main.ini"}
}

// confKeys are the configuration keys; none contains another, so grep KEY finds one line.
func confKeys() []string {
	return []string{"port", "host", "workers", "timeout", "retries", "log_level", "max_connections",
		"user", "cache_size", "data_dir"}
}

// logNames never repeat the service: a path that names it twice would tie the right grep with the wrong ones
// on the policy's instruction-match count.
func logNames() []string { return []string{"current.log", "app.log", "server.log", "main.log"} }

// homeFiles are visible files of a home directory with their contents.
func homeFiles() [][2]string {
	return [][2]string{
		{"notes.txt", "call the bank\nrenew the certificate\n"},
		{"todo.txt", "- fix the backup job\n- review pull requests\n- update docs\n"},
		{"report.md", "# Weekly report\n\nAll systems nominal.\n"},
		{"budget.csv", "month,amount\njan,1200\nfeb,950\n"},
		{"photo.jpg", "JFIF binary data\n"},
		{"draft.txt", "Dear team,\nthe migration is done.\n"},
		{"script.sh", "#!/bin/sh\necho hello\n"},
	}
}

// homeDirs are subdirectories of a home directory and the files they may hold.
func homeDirs() []struct {
	name  string
	files []string
} {
	return []struct {
		name  string
		files []string
	}{
		{"projects", []string{"main.go", "README.md", "Makefile", "go.mod"}},
		{"documents", []string{"cv.pdf", "letter.txt", "contract.pdf"}},
		{"backup", []string{"old.tar", "db.dump"}},
	}
}
