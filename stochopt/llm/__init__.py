"""The LLM as a source of kernels: the HTTP client (retries, prices, cache), the model's
context and token estimate, the prompts and the reading of replies, the settings, and the
variants each request asks for. Nothing here knows a chain: the search-side proposer
(stochopt/search/llm_proposer.py) feeds these to the chains."""
