from tiledispatch.arch.spec import ArchSpec, detect, get_arch, known_archs, normalize_arch

__all__ = ["ArchSpec", "detect", "get_arch", "known_archs", "normalize_arch"]
