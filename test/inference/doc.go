// Package inference is capgate's suite of an inference API driven by the
// official OpenAI client: the `openai` npm package (pinned in package.json
// and package-lock.json, installed by scripts/openai-deps.sh) runs
// client.mjs against a real `capgate serve` with the inference example's
// policy (examples/inference/policy.yaml), in front of simapi's inference
// engine. The tests check what an operator of an OpenAI-compatible API
// needs: per-model limits hold at the upstream (a model's own limit set
// with the CLI too), an aborted stream frees its place, embeddings cost
// seats by their texts, a call that timed out and was retried by the
// client runs once, two identical first attempts both run, a refusal is
// the SDK's RateLimitError with the policy's code and message (a paused
// model's at once, never retried), and 20 concurrent calls of two users
// all succeed with the default wait (the counts without it are logged). Without node or the package the tests skip, or fail when
// CAPGATE_REQUIRE_OPENAI=1 (set by .ci/run once the package is in).
package inference
