from tiledispatch.codegen.render import render_source
from tiledispatch.codegen.writer import read_manifest, write_instances

__all__ = ["read_manifest", "render_source", "write_instances"]
