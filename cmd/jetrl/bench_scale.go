package main

import "errors"

type benchScaleCmd struct{}

func (c *benchScaleCmd) Run(g *globals) error { return errors.New("not implemented") }
