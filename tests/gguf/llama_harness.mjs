// Runs llama.cpp (node-llama-cpp's prebuilt CPU build) and the reference tokenizer for the GGUF
// end-to-end test. One request in, one answer out, both JSON files:
//
//   node llama_harness.mjs NODE_PREFIX REQUEST.json ANSWER.json
//
// NODE_PREFIX is where install_node_deps.sh ran `npm ci` (its node_modules/ holds node-llama-cpp
// and @huggingface/tokenizers); this script lives in the source tree, so it imports them from there.
//
// Request: {"gguf": [{"path": "/mnt/.../NAME-Q8_0.gguf", "vocab": 1467,
//                     "sequences": [[ids...], ...], "texts": ["...", ...]}],
//           "hf_tokenizers": [{"dir": "/data/NAME", "texts": ["...", ...]}]}
// Answer:  {"gguf": [{"path": ..., "logprobs": ["PATH.seqN.f32", ...], "tokens": [[ids], ...]}
//                    or {"path": ..., "error": "why llama.cpp could not run it"}],
//           "hf_tokenizers": [{"dir": ..., "tokens": [[ids], ...]}]}
//
// For each GGUF file: llama.cpp loads it with mmap (the file is read through the mount), then
// evaluates each sequence with the next-token probabilities of every position, written as
// float32 log-probabilities [positions x vocab] to ANSWER's directory; and tokenizes each text
// with special tokens parsed and no BOS added. For each checkpoint directory:
// @huggingface/tokenizers encodes each text from tokenizer.json and tokenizer_config.json
// with no special tokens added.
//
// Sampling is greedy, so the probabilities are the softmax of the raw logits. The context keeps
// its KV cache in F32 and has flash attention off: the test compares the model file, not
// llama.cpp's cache rounding.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import {pathToFileURL} from "node:url";

const [prefix, requestPath, answerPath] = process.argv.slice(2);
if (!prefix || !requestPath || !answerPath) {
    console.error("usage: node llama_harness.mjs NODE_PREFIX REQUEST.json ANSWER.json");
    process.exit(2);
}

// The ES module entry of an installed package, as its package.json "exports" (or "module") names it.
async function importInstalled(name) {
    const dir = path.join(prefix, "node_modules", name);
    const pkg = JSON.parse(fs.readFileSync(path.join(dir, "package.json"), "utf8"));
    const root = pkg.exports?.["."];
    const entry = root?.node?.import ?? root?.import ?? pkg.module ?? pkg.main;
    return import(pathToFileURL(path.join(dir, typeof entry === "string" ? entry : root.default)).href);
}
const {getLlama, LlamaLogLevel} = await importInstalled("node-llama-cpp");
const {Tokenizer} = await importInstalled("@huggingface/tokenizers");
const request = JSON.parse(fs.readFileSync(requestPath, "utf8"));
const answer = {gguf: [], hf_tokenizers: []};

for (const item of request.hf_tokenizers ?? []) {
    const tokenizerJson = JSON.parse(fs.readFileSync(path.join(item.dir, "tokenizer.json"), "utf8"));
    const configPath = path.join(item.dir, "tokenizer_config.json");
    const config = fs.existsSync(configPath) ? JSON.parse(fs.readFileSync(configPath, "utf8")) : {};
    const tokenizer = new Tokenizer(tokenizerJson, config);
    answer.hf_tokenizers.push({
        dir: item.dir,
        tokens: item.texts.map((text) => Array.from(tokenizer.encode(text, {add_special_tokens: false}).ids,
                                                    Number)),
    });
}

if ((request.gguf ?? []).length > 0) {
    const llama = await getLlama({
        build: "never", skipDownload: true, gpu: false, usePrebuiltBinaries: true, progressLogs: false,
        logLevel: LlamaLogLevel.error,
    });
    const outDir = path.dirname(path.resolve(answerPath));
    for (const [fileIndex, item] of request.gguf.entries()) {
        try {
            answer.gguf.push(await runFile(llama, item, path.join(outDir, `gguf${fileIndex}`)));
        } catch (e) {
            // One file that llama.cpp refuses (or that is missing) is that file's failure only.
            answer.gguf.push({path: item.path, error: String(e?.stack ?? e)});
        }
    }
    await llama.dispose();
}

fs.writeFileSync(answerPath, JSON.stringify(answer));

async function runFile(llama, item, outPrefix) {
    const model = await llama.loadModel({modelPath: item.path, useMmap: true, useMlock: false, gpuLayers: 0});
    try {
        const longest = Math.max(1, ...item.sequences.map((s) => s.length));
        const size = Math.max(64, longest);
        const context = await model.createContext({
            // Threads said outright: node-llama-cpp's default spins many more than these tiny models
            // can use, which takes a loaded machine ~1 s per evaluation instead of ~50 ms.
            contextSize: size, batchSize: size, sequences: 1, flashAttention: false,
            threads: Math.max(1, Math.min(4, os.availableParallelism())),
            experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32",
        });
        const logprobFiles = [];
        const sequence = context.getSequence();
        for (const [seqIndex, ids] of item.sequences.entries()) {
            await sequence.clearHistory();
            const results = await sequence.controlledEvaluate(
                ids.map((token) => [token, {generateNext: {probabilities: true}}]));
            const out = new Float32Array(ids.length * item.vocab).fill(-Infinity);
            for (let pos = 0; pos < ids.length; pos++) {
                const probabilities = results[pos]?.next?.probabilities;
                if (probabilities == null) {
                    throw new Error(`no probabilities at position ${pos} of sequence ${seqIndex}`);
                }
                if (probabilities.size !== item.vocab) {
                    throw new Error(`${probabilities.size} candidate tokens at position ${pos}, ` +
                                    `expected the whole vocabulary of ${item.vocab}`);
                }
                for (const [token, p] of probabilities) {
                    out[pos * item.vocab + token] = Math.log(p);
                }
            }
            const file = `${outPrefix}.seq${seqIndex}.f32`;
            fs.writeFileSync(file, Buffer.from(out.buffer));
            logprobFiles.push(file);
        }
        sequence.dispose();
        const tokens = (item.texts ?? []).map((text) => Array.from(model.tokenize(text, true), Number));
        await context.dispose();
        return {path: item.path, logprobs: logprobFiles, tokens};
    } finally {
        await model.dispose();
    }
}
