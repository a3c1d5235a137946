package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/capgate/capgate/client"
	"github.com/capgate/capgate/policy"
)

func Example() {
	tr := client.NewTransport(nil)
	// The server's policy names its headers and refusal code; without
	// Names, the Transport speaks the generic Capgate-* ones.
	tr.Names = policy.OCL().Names.Header()
	d := client.NewDoer(tr)

	ctx := context.Background()
	req, _ := http.NewRequest(http.MethodPost, "https://api.example.org/concepts/$match/?semantic=true",
		strings.NewReader(`{"rows":[{"name":"malaria"},{"name":"fever"}]}`))
	req.Header.Set(tr.Names.Metadata, `{"algorithm_id":"ocl-semantic","batch_size":"2"}`)
	// The lanes of the policy a semantic $match takes: a refusal of a
	// lane this call does not take does not hold it back.
	lanes := []string{"api_heavy", "api_heavy_task", "es2_knn", "tier", "user"}
	resp, res, err := d.Do(ctx, req, client.Call{Class: client.Bulk, Lanes: lanes, IdempotencyKey: "run-42-batch-7"})
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
