package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/capgate/capgate/client"
	"github.com/capgate/capgate/header"
)

func Example() {
	tr := client.NewTransport(nil)
	d := client.NewDoer(tr)

	ctx := context.Background()
	req, _ := http.NewRequest(http.MethodPost, "https://api.example.org/concepts/$match/?semantic=true",
		strings.NewReader(`{"rows":[{"name":"malaria"},{"name":"fever"}]}`))
	req.Header.Set(header.EventMetadata, `{"algorithm_id":"ocl-semantic","batch_size":"2"}`)
	resp, res, err := d.Do(ctx, req, client.Call{Class: client.Bulk, Semantic: true, IdempotencyKey: "run-42-batch-7"})
	if te, ok := errors.AsType[*client.ThrottledError](err); ok {
		fmt.Printf("not run: %s limit (%s); retry after %s\n", te.Kind, te.Scope, te.Until)
		return
	}
	if err != nil {
		fmt.Println("failed:", err)
		return
	}
	defer resp.Body.Close()
	fmt.Println(resp.Status, "after", res.Attempts, "attempts, waited", res.Waited)
}
