"""Tasks from outside the embedded web: WebGym task files (the LLM judge and MiniWoB++
join them in the issue that asks for them)."""
