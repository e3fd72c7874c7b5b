package main

import "errors"

type benchWeightsCmd struct{}

func (c *benchWeightsCmd) Run(g *globals) error { return errors.New("not implemented") }
