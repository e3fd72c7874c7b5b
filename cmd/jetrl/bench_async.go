package main

import "errors"

type benchAsyncCmd struct{}

func (c *benchAsyncCmd) Run(g *globals) error { return errors.New("not implemented") }
