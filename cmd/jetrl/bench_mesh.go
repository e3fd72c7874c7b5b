package main

import "errors"

type benchMeshCmd struct{}

func (c *benchMeshCmd) Run(g *globals) error { return errors.New("not implemented") }
