package config

import (
	"errors"
	"testing"
)

func TestContainerIDIsTheHostnameOnlyForAContainersFirstProcess(t *testing.T) {
	host := func(name string, err error) func() (string, error) {
		return func() (string, error) { return name, err }
	}
	for _, c := range []struct {
		pid      int
		hostname func() (string, error)
		want     string
	}{
		{1, host("4f1c2a9b7e3d", nil), "4f1c2a9b7e3d"},
		{1, host("rollout-7d9f-abcde", nil), "rollout-7d9f-abcde"},
		{4242, host("4f1c2a9b7e3d", nil), ""}, // not a container's first process: replicas may share the host name
		{1, host("", nil), ""},
		{1, host("localhost", nil), ""},
		{1, host("", errors.New("uname failed")), ""},
	} {
		if got := ContainerID(c.pid, c.hostname); got != c.want {
			h, _ := c.hostname()
			t.Errorf("ContainerID(pid %d, hostname %q) = %q, want %q", c.pid, h, got, c.want)
		}
	}
}

// A given id stands; without one, a test process (not its container's first) draws a random id.
func TestServiceIDPrefersTheGivenOne(t *testing.T) {
	if id, from := ServiceID("rb-1"); id != "rb-1" || from != "given" {
		t.Errorf("ServiceID(rb-1) = %q from %q", id, from)
	}
	if id, from := ServiceID(""); id != "" || from != "random" {
		t.Errorf("ServiceID(\"\") = %q from %q, want a random id for a process that is not pid 1", id, from)
	}
}
