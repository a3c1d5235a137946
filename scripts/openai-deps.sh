#!/usr/bin/env bash
# Installs the official OpenAI Node client the inference suite (test/inference)
# drives capgate with: the exact version pinned in test/inference/package.json
# and package-lock.json, with `npm ci` (from the npm registry). Prints what it
# installed, or why the suite will skip (no node or npm).
set -euo pipefail
cd "$(dirname "$0")/../test/inference"

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
	echo "openai client: node or npm not available; the inference suite (test/inference) will skip"
	exit 0
fi
npm ci --no-audit --no-fund --loglevel=error >/dev/null
echo "openai client: $(node -p 'require("./node_modules/openai/package.json").version') (node $(node --version)) in test/inference/node_modules"
