"""Scale-out on Ray Serve: replicas of the same OpenAI app, with prefix-affine routing.

`spec` (what to deploy, as plain data), `router` (the pure routing policy),
`ray_router` (its Ray Serve `RequestRouter`), `app` (the replica and ingress
deployments), `run` (`ffwd serve --replicas`), `config` and `cli`
(`ffwd deploy config`). Modules that import Ray are imported only when used.
"""
