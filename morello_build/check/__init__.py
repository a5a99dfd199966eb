"""Checking programs: the numpy interpreter of Impl trees and the C++ test helpers."""
