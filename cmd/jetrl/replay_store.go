package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/minio/highwayhash"
)

// keepAgedMessages lifts the age limit of every stream stored under a copied JetStream folder (the
// server's store dir), so that a server started on the copy keeps the messages past it: a server expires
// them as it loads a stream, before any client could read them. Each stream's configuration is its
// meta.inf (JSON) beside meta.sum, the hex of its 64-bit HighwayHash keyed by the SHA-256 of the stream's
// directory name; both are rewritten. It returns the streams whose limit it lifted. An encrypted stream
// (meta.key beside them) is an error: its configuration cannot be read here. Messages with a TTL of their
// own would still expire (jetrl's streams allow none).
func keepAgedMessages(store string) ([]string, error) {
	var metas []string
	accounts, err := os.ReadDir(filepath.Join(store, "jetstream"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	for _, acc := range accounts {
		streams, err := os.ReadDir(filepath.Join(store, "jetstream", acc.Name(), "streams"))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		} else if err != nil {
			return nil, err
		}
		for _, st := range streams {
			meta := filepath.Join(store, "jetstream", acc.Name(), "streams", st.Name(), "meta.inf")
			if _, err := os.Stat(meta); err == nil {
				metas = append(metas, meta)
			}
		}
	}
	var lifted []string
	for _, meta := range metas {
		dir := filepath.Dir(meta)
		if _, err := os.Stat(filepath.Join(dir, "meta.key")); err == nil {
			return lifted, fmt.Errorf("stream %s is encrypted", filepath.Base(dir))
		}
		b, err := os.ReadFile(meta)
		if err != nil {
			return lifted, err
		}
		var cfg map[string]json.RawMessage
		if err := json.Unmarshal(b, &cfg); err != nil {
			return lifted, fmt.Errorf("stream %s: %s: %w", filepath.Base(dir), meta, err)
		}
		if age, ok := cfg["max_age"]; !ok || bytes.Equal(age, []byte("0")) {
			continue
		}
		cfg["max_age"] = json.RawMessage("0")
		if b, err = json.Marshal(cfg); err != nil {
			return lifted, err
		}
		key := sha256.Sum256([]byte(filepath.Base(dir)))
		h, err := highwayhash.NewDigest64(key[:])
		if err != nil {
			return lifted, err
		}
		h.Write(b)
		if err := os.WriteFile(meta, b, 0o600); err != nil {
			return lifted, err
		}
		if err := os.WriteFile(filepath.Join(dir, "meta.sum"), []byte(hex.EncodeToString(h.Sum(nil))), 0o600); err != nil {
			return lifted, err
		}
		lifted = append(lifted, filepath.Base(dir))
	}
	return lifted, nil
}
