package db

import (
	"sync"
)

// imageCacheSize is how many instances' database images a family keeps. A group's G sessions play one
// instance and open their databases within a few turns of each other, so an image is needed only until
// the group's last session has opened: 128 covers 128 db groups starting at once on one host. An image
// is two or three 4 KiB pages (10 KiB on average over 200 instances), its key the setup script (1.8 KiB
// on average): about 1.5 MiB when full.
const imageCacheSize = 128

// imageCache keeps the serialized database of recently opened instances, keyed by their setup script:
// every session after an instance's first opens its database by copying the image's pages instead of
// parsing and running the script again. A nil cache keeps nothing. Safe for concurrent use.
type imageCache struct {
	mu     sync.Mutex
	images map[string][]byte
	order  []string // keys, oldest first; the oldest is evicted at imageCacheSize
	hits   uint64
	misses uint64
}

func newImageCache() *imageCache { return &imageCache{images: make(map[string][]byte)} }

// get returns the image of setup, or nil. The image is shared: callers only read it.
func (c *imageCache) get(setup string) []byte {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	img := c.images[setup]
	if img == nil {
		c.misses++
	} else {
		c.hits++
	}
	return img
}

// put keeps img as setup's image, evicting the oldest image beyond imageCacheSize.
func (c *imageCache) put(setup string, img []byte) {
	if c == nil || len(img) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.images[setup]; ok {
		return // another session of the instance opened it meanwhile
	}
	if len(c.order) >= imageCacheSize {
		delete(c.images, c.order[0])
		c.order = c.order[1:]
	}
	c.images[setup] = img
	c.order = append(c.order, setup)
}

// stats returns the images kept and the lookups that found one and that did not.
func (c *imageCache) stats() (kept int, hits, misses uint64) {
	if c == nil {
		return 0, 0, 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.images), c.hits, c.misses
}
