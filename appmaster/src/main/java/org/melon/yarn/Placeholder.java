package org.melon.yarn;
final class Placeholder {}
