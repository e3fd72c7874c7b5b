module github.com/jetrl/jetrl/tests

go 1.26.0
